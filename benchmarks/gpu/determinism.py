"""How far two identical tiny LOPD runs drift apart on this device, with and without
``run.deterministic``: the largest relative difference of any logged metric over 4 steps.

On CPUs lopd's runs repeat exactly. On GPUs atomic adds (index_add, index_select's backward)
sum in a varying order, so two runs differ in the last bits and the differences grow with
training; ``run.deterministic`` switches torch to its deterministic kernels.

    python3 benchmarks/gpu/determinism.py [--out runs/determinism.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


def largest_difference(a: list[dict], b: list[dict]) -> float:
    """max |x - y| / max(|x|, |y|, 1e-4) over every logged metric of every step."""
    worst = 0.0
    for x, y in zip(a, b):
        for key, value in x.items():
            scale = max(abs(value), abs(y[key]), 1e-4)
            worst = max(worst, abs(value - y[key]) / scale)
    return worst


def twice(deterministic: bool, tmp: Path) -> float:
    from test_trainer import _config, _metrics

    from lopd.trainer import Trainer

    runs = []
    for name in ("first", "second"):
        trainer = Trainer(_config(tmp / f"{deterministic}-{name}", "lopd", steps=4, **{
            "run.deterministic": str(deterministic).lower()}))
        trainer.fit()
        runs.append(_metrics(trainer.metrics_path))
    return largest_difference(*runs)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/determinism.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                  "default": twice(False, Path(tmp)),  # before the flag: it is process-wide
                  "deterministic": twice(True, Path(tmp))}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
