"""lopd's composer and teacher choices vs the authors' code, one at a time, on the SmolLM2 preset.

For each variant (lopd's defaults, then one authors' choice switched on at a time) this builds
a fresh LOPD run on the warm-started SmolLM2-135M (``model.init_adapter``; the teacher is that
warm-started model): the bank is seeded from reference solutions and the composer is cold
started, which reports the teacher's held-out NLL per action token without and with latent
context (``coldstart.json``). Then one training step's rollouts are scored and the step-0
privilege margin Delta (eq. 12, before any update) is read from the step's metrics. Every
variant sees the same rollouts (same student, same seeds), so Delta differs only through the
context.

The anchor reduction is not a variant here: at step 0 the composer is phi_0, so c = c0 and the
anchor and its gradient are zero whatever the reduction.

    .venv/bin/python benchmarks/studies/bench_parity.py --adapter runs/sft/adapter \
        --out benchmarks/results/studies/parity.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {
    "lopd defaults": [],
    "framed latents (theirs)": ["method.latent_placement=framed"],
    "LayerNorm scale (theirs)": ["method.latent_scale=layernorm"],
    "shared resampler x8 (theirs)": ["method.compressor=shared", "method.composer_layers=8"],
    "full transcript input (theirs)": ["method.encoder_input=full"],
    "self-retrieval (theirs)": ["method.allow_self_retrieval=true"],
}


def run_variant(name: str, extra: list[str], args) -> dict:
    """One variant in a fresh run directory; returns its measurements."""
    from lopd.config import load_config
    from lopd.trainer import Trainer

    out = Path(args.work) / name.split(" (")[0].replace(" ", "-")
    shutil.rmtree(out, ignore_errors=True)
    overrides = [
        f"model.init_adapter={args.adapter}", f"run.out_dir={out}", "run.tensorboard=false",
        f"method.seed_experiences={args.seed_experiences}",
        f"method.cold_start_steps={args.cold_start_steps}",
        f"method.cold_start_batch={args.cold_start_batch}", "optim.steps=1",
        f"optim.tasks_per_step={args.tasks}", f"optim.group_size={args.group}",
        f"optim.micro_batch={args.group}", f"rollout.max_steps={args.max_steps}",
        f"rollout.max_new_tokens={args.max_new_tokens}", f"run.threads={args.threads}", *extra,
    ]
    config = load_config(args.config, overrides)
    started = time.perf_counter()
    trainer = Trainer(config)
    setup = time.perf_counter() - started
    metrics = trainer.train_step(0)
    cold = json.loads((out / "coldstart.json").read_text())
    return {"variant": name, "overrides": extra, "setup_s": round(setup, 1),
            "step_s": round(metrics["time/total"], 1), "examples": cold.get("examples"),
            "nll_no_context": cold.get("heldout_nll_no_context"),
            "nll_context": cold.get("heldout_nll_context"), "delta": metrics["delta"],
            "distill": metrics["distill"], "signal_rows": metrics["signal_rows"],
            "success": metrics["success"], "rollouts": args.tasks * args.group}


def markdown(rows: list[dict], args, cpu: str) -> str:
    lines = [
        "# Parity: lopd's choices vs the authors', one at a time (SmolLM2-135M + warm start)",
        "",
        (f"Command: `.venv/bin/python benchmarks/studies/bench_parity.py --adapter {args.adapter} "
        f"--seed-experiences {args.seed_experiences} --cold-start-steps {args.cold_start_steps} "
        f"--cold-start-batch {args.cold_start_batch} --tasks {args.tasks} --group {args.group} "
        f"--max-steps {args.max_steps} --max-new-tokens {args.max_new_tokens} "
        f"--threads {args.threads}`"),
        "",
        f"Machine: {cpu}. Teacher = the warm-started model (init adapter merged into the base).",
        (f"Cold start: {args.cold_start_steps} steps of {args.cold_start_batch} examples on the "
         f"seed bank ({args.seed_experiences} "
        "reference solutions); NLL = teacher NLL per action token on the held-out fifth of the "
        "cold-start examples. Delta = step-0 privilege margin (eq. 12) on "
        f"{args.tasks} tasks x {args.group} rollouts (the same rollouts for every variant)."),
        "",
        ("| variant | NLL no context | NLL with context | context gain | step-0 Delta | "
        "distill | setup s |"),
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gain = r["nll_no_context"] - r["nll_context"] if r["nll_context"] is not None else None
        lines.append(
            f"| {r['variant']} | {r['nll_no_context']:.4f} | {r['nll_context']:.4f} | "
            f"{gain:+.4f} | {r['delta']:+.4f} | {r['distill']:.4f} | {r['setup_s']} |")
    notes = Path(args.out).with_name("parity_notes.md")  # the human reading, kept on rewrites
    return "\n".join(lines) + "\n" + (notes.read_text() if notes.exists() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/toolworld-smollm2.yaml")
    parser.add_argument("--adapter", default="runs/sft/adapter")
    parser.add_argument("--work", default="runs/parity")
    parser.add_argument("--out", default="benchmarks/results/studies/parity.md")
    parser.add_argument("--variants", default="", help="comma-separated subset (names' prefixes)")
    parser.add_argument("--seed-experiences", type=int, default=150)
    parser.add_argument("--cold-start-steps", type=int, default=30)
    parser.add_argument("--cold-start-batch", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the markdown from the JSON rows, run nothing")
    args = parser.parse_args(argv)
    wanted = [v for v in args.variants.split(",") if v]
    chosen = {k: v for k, v in VARIANTS.items()
              if not wanted or any(k.startswith(w) for w in wanted)}
    cpu = subprocess.run([sys.executable, "-m", "lopd.cli", "info"], capture_output=True,
                         text=True, check=False).stdout
    cpu = next((line.strip() for line in cpu.splitlines() if "cpu capability" in line),
               "unknown")
    json_path = Path(args.out).with_suffix(".json")
    rows = json.loads(json_path.read_text()) if json_path.exists() else []
    done = {r["variant"] for r in rows}
    if args.report_only:
        Path(args.out).write_text(markdown(rows, args, cpu))
        return 0
    for name, extra in chosen.items():
        if name in done:
            continue
        rows.append(run_variant(name, extra, args))
        json_path.write_text(json.dumps(rows, indent=2))  # resumable: one row per variant
        Path(args.out).write_text(markdown(rows, args, cpu))
        print(markdown(rows, args, cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
