"""Does the privileged context help LOPD's teacher? Its margin on real rollouts, per context.

LOPD's student learns from the teacher only where the context moves the teacher towards the
tokens of successful rollouts and away from those of failed ones: eq. 12's
``Delta = mean_tau A(tau) * mean_n (log pT(a_n) - sg log pS(a_n))`` with ``A = 2r - 1``. At the
warm start the teacher and the student are the same weights, so ``log pT - log pS`` is exactly
what the context adds to the log-probability of each sampled token.

This rolls out a few steps of the learning sweep's LOPD setting (``benchmarks.learning``
variant, committed warm start), with no optimiser step so that every step scores the warm
start, and re-scores each step's rollouts under several contexts:

- ``latent``: the composed J*K latents (phi_0 from this run's cold start), other tasks' rows;
- ``latent-self``: the same, but a task may retrieve its own rows (the authors' code), which
  include this step's successful rollouts of the same task (the bank is updated first);
- ``text`` / ``text-self``: the same J retrieved experiences as a text block;
- ``own``: the variant's own teacher context, whatever its method builds (for SDPO a sibling's
  successful rollout and the feedback, for OPSD the reference trace, for SDFT the
  demonstration): ``--variant sdpo-lr5e-4-t0.7-tier1-g8 --contexts own``.

Per context it reports, over the rollouts that had a context, the mean shift
``mean_n (log pT - log pS)`` on successful and on failed rollouts, their difference, and Delta,
each with its standard error over rollouts.

    .venv/bin/python -m benchmarks.teacher_privilege --steps 0,1,2

Writes ``benchmarks/results/NAME.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.bench_throughput import cpu_line
from benchmarks.bench_update import build, command_line
from benchmarks.learning import VARIANTS, WARM_ADAPTER
from lopd import trainer as trainer_module
from lopd.batch import gather_token_logprobs
from lopd.config import apply, parse_overrides
from lopd.evaluate import standard_error

RESULTS = Path(__file__).parent / "results"
CONTEXTS = {
    "latent": ("method.context=latent", False),
    "latent-self": ("method.context=latent", True),
    "text": ("method.context=text", False),
    "text-self": ("method.context=text", True),
    "own": (None, None),
}
"""Context name -> (override of method.context, whether a task may retrieve its own bank rows);
None leaves the variant's setting as it is."""


def recording_distill_loss(record: list):
    """``lopd.methods.distill_loss`` that also appends, per scored row, (signal, mean shift,
    mean entropy gap H(pT) - H(pS)) over its supervised positions."""
    original = trainer_module.distill_loss

    def wrapped(method, student, teacher, targets, rows, active, signal, *args, **kwargs):
        for row in range(active.shape[0]):
            at = (rows == row).nonzero().squeeze(-1)
            if bool(active[row]) and at.numel():
                with torch.no_grad():
                    shift = (gather_token_logprobs(teacher[at], targets[at])
                             - gather_token_logprobs(student[at], targets[at])).mean()
                    gap = (entropy(teacher[at]) - entropy(student[at])).mean()
                record.append((float(signal[row]), float(shift), float(gap)))
        return original(method, student, teacher, targets, rows, active, signal, *args, **kwargs)

    return wrapped


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy (nats) of softmax(logits), computed in fp32."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def mean_se(values: list[float]) -> tuple[float, float]:
    return (statistics.fmean(values), standard_error(values)) if values else (math.nan, math.nan)


def summarize(rows: list[tuple]) -> dict:
    """Shift on successes and failures, their difference, Delta and (where recorded) the
    entropy gap, each (mean, SE); a row is (signal, shift) or (signal, shift, entropy gap)."""
    wins = [r[1] for r in rows if r[0] > 0]
    fails = [r[1] for r in rows if r[0] <= 0]
    win, win_se = mean_se(wins)
    fail, fail_se = mean_se(fails)
    delta, delta_se = mean_se([r[0] * r[1] for r in rows])
    gap, gap_se = mean_se([r[2] for r in rows if len(r) > 2])
    return {"rows": len(rows), "successes": len(wins), "failures": len(fails),
            "shift_success": [win, win_se], "shift_failure": [fail, fail_se],
            "difference": [win - fail, math.hypot(win_se, fail_se)],
            "delta": [delta, delta_se], "entropy_gap": [gap, gap_se]}


def score(trainer, trajs, step: int, contexts: list[str], record: list) -> dict[str, list]:
    """Re-score one step's rollouts under each context through the trainer's own update
    (its backward included; no optimiser step); the recorded (signal, shift) rows."""
    found: dict[str, list] = {}
    for name in contexts:
        override, allow_self = CONTEXTS[name]
        if override is not None:
            apply(trainer.config, parse_overrides([override]))
        if allow_self is not None:
            trainer.rt.provider.allow_self = allow_self
        record.clear()
        context = trainer.rt.context(trajs, step)
        trainer.update(trajs, context, {})
        trainer.rt.zero_grad()
        found[name] = list(record)
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.teacher_privilege",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="lopd-lr5e-4-t0.7-tier1-g8", choices=sorted(VARIANTS))
    parser.add_argument("--from-run", default="", help="run directory to copy the bank and phi_0 from")
    parser.add_argument("--adapter", default=str(WARM_ADAPTER))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", default="0,1,2", help="which steps' tasks to roll out")
    parser.add_argument("--contexts", default=",".join(c for c in CONTEXTS if c != "own"),
                        help=f"comma-separated, of {', '.join(CONTEXTS)}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], help="more overrides")
    parser.add_argument("--name", default="teacher_privilege")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args(argv)
    contexts = args.contexts.split(",")
    unknown = sorted(set(contexts) - set(CONTEXTS))
    if unknown:
        parser.error(f"--contexts: unknown {unknown}; choose from {sorted(CONTEXTS)}")
    record: list = []
    trainer_module.distill_loss = recording_distill_loss(record)
    per_context: dict[str, list] = {name: [] for name in contexts}
    steps = [int(s) for s in args.steps.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build(args, Path(tmp) / "run")
        setup = time.perf_counter() - started
        trainer.rt.optimizer_step = lambda: None  # every step scores the warm start
        report_file = Path(tmp) / "run" / "coldstart.json"
        coldstart = json.loads(report_file.read_text()) if report_file.exists() else {}
        rewards = []
        for step in steps:
            trajs = trainer.rt.rollout(trainer.sample_tasks(step), step)
            rewards += [t.reward for t in trajs]
            trainer.rt.update_bank(trajs, step)
            for name, pairs in score(trainer, trajs, step, contexts, record).items():
                per_context[name] += pairs
            print(f"step {step}: reward {statistics.fmean(t.reward for t in trajs):.3f}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    result = {
        "command": command_line("benchmarks.teacher_privilege", args),
        "cpu": cpu_line(), "setup_seconds": round(setup, 1),
        "seconds": round(time.perf_counter() - started, 1), "rollouts": len(rewards),
        "mean_reward": statistics.fmean(rewards),
        "coldstart": {k: v for k, v in coldstart.items() if k != "train_losses"},
        "contexts": {name: summarize(pairs) for name, pairs in per_context.items()},
    }
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{args.name}.md").write_text(report(args, result))
    print((out / f"{args.name}.md").read_text())


def _pm(pair: list[float]) -> str:
    return f"{pair[0]:+.4f} +- {pair[1]:.4f}"


def report(args, result: dict) -> str:
    rows = [f"| {name} | {s['rows']} ({s['successes']} / {s['failures']}) | {_pm(s['shift_success'])} | "
            f"{_pm(s['shift_failure'])} | {_pm(s['difference'])} | {_pm(s['delta'])} | "
            f"{_pm(s['entropy_gap'])} |"
            for name, s in result["contexts"].items()]
    return "\n".join([
        "# The teacher's margin at the warm start, per privileged context", "",
        f"    {result['command']}", "", f"CPU: {result['cpu']}", "",
        (f"Variant `{args.variant}`, seed {args.seed}, the tasks of steps {args.steps}: "
         f"{result['rollouts']} rollouts, mean reward {result['mean_reward']:.3f}; no optimiser "
         f"step, so the teacher and the student are the warm start and the shift is what the "
         f"context adds. Setup (bank and cold start where the method has them) {result['setup_seconds']} s; all "
         f"{result['seconds']} s. Cold start: {json.dumps(result['coldstart'])}."), "",
        ("Shift = mean over a rollout's sampled tokens of log pT - log pS (nats per token); "
         "Delta = mean of (2r - 1) x shift (eq. 12); entropy gap = mean over a rollout's positions "
         "of H(pT) - H(pS) (positive: the context leaves the teacher less sure than the student, "
         "and a divergence toward it flattens the student); +- one standard error over "
         "rollouts. The margin m is 0.05."), "",
        ("| context | rollouts (successes / failures) | shift, successes | shift, failures | "
         "difference | Delta | entropy gap |"),
        "|---|---|---|---|---|---|---|", *rows, ""])


if __name__ == "__main__":
    main()
