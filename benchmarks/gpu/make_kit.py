"""Pack what lopd's GPU check needs on an offline GPU machine into one small folder.

The GPU machine has torch, transformers, PEFT and sentence-transformers but no network and no
lopd wheels. This packs: the faiss-cpu wheel; SmolLM2's tokenizer and config (the check builds
random weights of that shape there: timings need the shapes, not the trained weights); and
all-MiniLM-L6-v2 with its weight matrices stored as int8 with one fp32 scale per row (21 MB
instead of 91 MB). `prepare.py` turns them back into fp32; `prepare.py --check-minilm` compares
the embeddings with the original's (lowest cosine over 64 ToolWorld prompts: 0.9992).

    .venv/bin/python benchmarks/gpu/make_kit.py --out .gpu
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

TOKENIZER_FILES = ("chat_template.jinja", "config.json", "generation_config.json",
                   "tokenizer.json", "tokenizer_config.json")
MINILM_FILES = ("1_Pooling", "config.json", "config_sentence_transformers.json", "modules.json",
                "sentence_bert_config.json", "special_tokens_map.json", "tokenizer.json",
                "tokenizer_config.json", "vocab.txt")


def quantise_rows(weights: dict) -> dict[str, np.ndarray]:
    """Matrices -> int8 values (``name::q``) and per-row scales (``name::s``); rest as fp32."""
    arrays = {}
    for name, tensor in weights.items():
        tensor = tensor.float()
        if tensor.ndim == 2 and tensor.numel() > 4096:
            scale = tensor.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
            arrays[name + "::q"] = (tensor / scale).round().clamp(-127, 127).char().numpy()
            arrays[name + "::s"] = scale.numpy()
        else:
            arrays[name] = tensor.numpy()
    return arrays


def main() -> None:
    from safetensors.torch import load_file

    from lopd.experience.retriever import minilm_path
    from lopd.models import SMOLLM2, resolve_model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".gpu")
    parser.add_argument("--faiss", default="faiss-cpu==1.15.1")
    args = parser.parse_args()
    out = Path(args.out)
    (out / "whl").mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                    "-d", str(out / "whl"), args.faiss], check=True)
    smol = resolve_model_dir(SMOLLM2)
    (out / "smollm2").mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(smol / name, out / "smollm2" / name)
    minilm = minilm_path()
    (out / "minilm").mkdir(exist_ok=True)
    for name in MINILM_FILES:
        source, target = minilm / name, out / "minilm" / name
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy(source, target)
    np.savez_compressed(out / "minilm" / "weights_int8.npz",
                        **quantise_rows(load_file(str(minilm / "model.safetensors"))))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"kit in {out}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
