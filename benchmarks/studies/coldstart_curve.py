"""Does a longer composer cold start put the business rules into the latents?

LOPD's teacher is privileged only if the latents composed from retrieved experience carry what
the prompt lacks. On the rules suites the warm start reads a rule from a success shown as text
(``benchmarks/results/rules/teacher_privilege.md``: -0.43 nats on the rule-blind tool name), but
after the default 30-step cold start the latents carry a tenth of that. This study runs the
cold start of LOPD's setting for longer, one optimiser throughout, and at chosen steps measures
on the cold start's own held-out fifth (reference solutions of other training tasks, each with
its retrieved experiences, the examples ``lopd.method_parts.run_cold_start`` holds out):

- the teacher's NLL per action token without and with the latents (what the cold start
  reports), as a mean over examples of each example's shift (NLL without - NLL with; > 0: the
  latents help);
- the same shift on the tokens a rule decides (``benchmarks.rule_tokens``: the name of the
  reference's first prerequisite call, on examples whose reference makes one).

    OMP_NUM_THREADS=2 .venv/bin/python -m benchmarks.studies.coldstart_curve --at 0,30,100,200 \\
        --set data.train_suite=toolworld-rules-train

Writes ``benchmarks/results/NAME.{json,md}`` (default ``rules/coldstart_curve``) after every
measurement, so a stopped run keeps its points.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.bench_throughput import cpu_line
from benchmarks.bench_update import build, command_line
from benchmarks.learning import VARIANTS, WARM_ADAPTER
from benchmarks.rule_tokens import decision_tokens
from lopd.evaluate import standard_error

RESULTS = Path(__file__).resolve().parents[1] / "results"


@torch.no_grad()
def shifts(rt, held: list) -> dict:
    """Per held-out example: NLL without - with the latents (``all``, and ``rule_tokens``: the
    rule-deciding tokens), and NLL with another example's latents - with its own (``specific``,
    ``rule_specific``: what the latents say about this experience beyond any latent context);
    each summarised as [mean, SE, examples]. ``diversity``: ``lopd.composer.latent_diversity``."""
    from lopd.coldstart import shuffled_examples, teacher_nll
    from lopd.method_parts import composer_diversity

    pad = rt.tokenizer.pad_token_id or 0
    values: dict[str, list[float]] = {"all": [], "rule_tokens": [], "specific": [],
                                      "rule_specific": []}
    rt.composer.eval()
    for example, other in zip(held, shuffled_examples(held)):
        with rt.autocast():
            plain, _ = teacher_nll(rt.composer, rt.model, [example], False, rt.teacher_model,
                                   pad, rt.placement)
            latent, _ = teacher_nll(rt.composer, rt.model, [example], True, rt.teacher_model,
                                    pad, rt.placement)
            foreign, _ = teacher_nll(rt.composer, rt.model, [other], True, rt.teacher_model,
                                     pad, rt.placement)
        shift, specific = plain.float() - latent.float(), foreign.float() - latent.float()
        values["all"].append(float(shift.mean()))
        values["specific"].append(float(specific.mean()))
        found = decision_tokens(example.trajectory, rt.tokenizer)
        if found is not None and found[1] == "prerequisite":
            values["rule_tokens"].append(float(shift[found[0]].mean()))
            values["rule_specific"].append(float(specific[found[0]].mean()))
    summary = {name: [statistics.fmean(v), standard_error(v), len(v)] if v else None
               for name, v in values.items()}
    summary["diversity"] = composer_diversity(rt.composer, held)
    rt.composer.train()
    return summary


def write(args, result: dict) -> None:
    """``NAME.json`` and a table in ``NAME.md``."""
    path = Path(args.results_dir) / args.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# {__doc__.splitlines()[0]}", "", f"    {result['command']}", "",
             f"CPU: {result['cpu']}", "",
             (f"{result['examples']} examples ({result['held_out']} held out), batch "
              f"{result['batch']}, lr {result['lr']:g}; {result['seconds']:.0f} s in all, "
              f"{result['seconds_per_step']:.1f} s per cold-start step. Shift = NLL without - "
              "NLL with the latents, nats per token, mean +- SE over held-out examples "
              "(> 0: the latents help)."), "",
             ("Specific = NLL with another example's latents - NLL with its own (> 0: the latents "
              "carry their experience, not just a context any experience would give). Cosines: "
              "`lopd.composer.latent_diversity` (within one experience's K latents; across "
              "experiences, same k); both near 1 = one input-blind vector."), "",
             ("| cold-start steps | shift, all action tokens | shift, rule-deciding tokens | "
              "specific, all | specific, rule-deciding | cosine within / across | "
              "train loss (mean of the last 10 steps) |"),
             "|---|---|---|---|---|---|---|"]
    for point in result["points"]:
        cells = [f"{v[0]:+.4f} +- {v[1]:.4f} ({v[2]})" if v else "-"
                 for v in (point["all"], point["rule_tokens"], point.get("specific"),
                           point.get("rule_specific"))]
        cosines = point.get("diversity") or {}
        cosine = (f"{cosines['within']:.4f} / {cosines['across']:.4f}" if cosines else "-")
        loss = point["train_loss"]
        lines.append(f"| {point['step']} | {' | '.join(cells)} | {cosine} | "
                     f"{'-' if loss is None else f'{loss:.4f}'} |")
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    from lopd.coldstart import cold_start
    from lopd.method_parts import cold_start_examples, held_out_count

    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.coldstart_curve",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="lopd-lr5e-4-t0.7-tier1-g8", choices=sorted(VARIANTS))
    parser.add_argument("--adapter", default=str(WARM_ADAPTER))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--at", default="0,30,100,200", help="cold-start steps to measure at")
    parser.add_argument("--set", nargs="*", default=[], help="more overrides")
    parser.add_argument("--composer", default="",
                        help="measure this saved composer (e.g. a run's composer_phi0) at step 0")
    parser.add_argument("--name", default="rules/coldstart_curve")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args(argv)
    args.from_run = ""
    at = sorted({int(s) for s in args.at.split(",")})
    if args.composer and at != [0]:
        parser.error("--composer measures a saved composer: use it with --at 0")
    command = command_line("benchmarks.studies.coldstart_curve", args)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        args.set = [*args.set, "method.cold_start_steps=0"]  # the build seeds the bank only
        rt = build(args, Path(tmp) / "run").rt
        cfg = rt.config.method
        examples = cold_start_examples(rt)
        held = examples[: held_out_count(len(examples))]
        fit = examples[len(held):]
        result = {"command": command,
                  "cpu": cpu_line(), "examples": len(examples), "held_out": len(held),
                  "batch": cfg.cold_start_batch, "lr": cfg.cold_start_lr, "points": [],
                  "seconds": 0.0, "seconds_per_step": 0.0}
        losses: list[float] = []
        train_started = [0.0]

        def measure(step: int) -> None:
            point = {"step": step, **shifts(rt, held),
                     "train_loss": statistics.fmean(losses[-10:]) if losses else None}
            result["points"].append(point)
            result["seconds"] = round(time.perf_counter() - started, 1)
            write(args, result)
            print(json.dumps(point), flush=True)

        result["losses"] = losses  # every step's training loss, written with each point

        def log(step: int, loss: float) -> None:
            losses.append(loss)
            result["seconds_per_step"] = (time.perf_counter() - train_started[0]) / (step + 1)
            if (step + 1) % 10 == 0:
                print(f"cold-start step {step + 1}: loss {statistics.fmean(losses[-10:]):.4f}, "
                      f"{result['seconds_per_step']:.1f} s per step", flush=True)
            if step + 1 in at:
                paused = time.perf_counter()
                measure(step + 1)
                train_started[0] += time.perf_counter() - paused  # not a training step's time

        if args.composer:
            rt.composer.load(args.composer)
        if 0 in at:
            measure(0)
        train_started[0] = time.perf_counter()
        with rt.checkpointing():
            cold_start(rt.composer, rt.model, rt.tokenizer, fit, max(at), lr=cfg.cold_start_lr,
                       batch_size=cfg.cold_start_batch, grad_clip=cfg.cold_start_clip,
                       weight_decay=rt.config.optim.weight_decay, seed=rt.config.run.seed,
                       teacher_model=rt.teacher_model, evaluate=False, log=log, dtype=rt.dtype,
                       placement=rt.placement, contrast=cfg.cold_start_contrast,
                       contrast_margin=cfg.cold_start_contrast_margin)
    print((Path(args.results_dir) / args.name).with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
