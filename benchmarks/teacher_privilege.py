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
  demonstration): ``--variant sdpo-lr5e-4-t0.7-tier1-g8 --contexts own``;
- ``latent-org`` / ``text-org``: on the business-rules suites (``lopd.envs.toolworld.rules``),
  the J nearest experiences *of the task's own organisation* (other tasks' rows), as latents or
  as text.

On the rules suites it also measures the shift on the tokens a rule decides
(``benchmarks.rule_tokens``: the name of the rollout's first call to a prerequisite or a gated
tool), and the share of retrieved experiences that come from the task's own organisation:

    .venv/bin/python -m benchmarks.teacher_privilege --steps 0,1,2,3,4,5 \
        --contexts latent,text --keep-run runs/tp-rules \
        --set data.train_suite=toolworld-rules-train --name rules/teacher_privilege

(``--keep-run`` keeps phi_0 and the bank; ``--from-run runs/tp-rules`` then skips the cold
start, which takes most of the time on a CPU.)

Per context it reports, over the rollouts that had a context, the mean shift
``mean_n (log pT - log pS)`` on successful and on failed rollouts, their difference, and Delta,
each with its standard error over rollouts.

    .venv/bin/python -m benchmarks.teacher_privilege --steps 0,1,2

Writes ``benchmarks/results/NAME.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
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
from benchmarks.rule_tokens import decision_tokens
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
    "latent-org": ("method.context=latent", False),
    "text-org": ("method.context=text", False),
    "own": (None, None),
}
"""Context name -> (override of method.context, whether a task may retrieve its own bank rows);
None leaves the variant's setting as it is. The ``-org`` contexts keep the task's organisation's
experiences only (``same_org_retrieval``)."""
SAME_ORG_POOL = 40
"""Nearest experiences the ``-org`` contexts pick their J same-organisation rows from."""


def recording_distill_loss(record: list, tokenizer=None):
    """``lopd.methods.distill_loss`` that also appends, per scored row, (signal, mean shift,
    mean entropy gap H(pT) - H(pS)) over its supervised positions, then (with ``tokenizer``)
    the mean shift on the tokens a rule decides and which call they name (None, None when the
    rollout has none: ``benchmarks.rule_tokens``)."""
    original = trainer_module.distill_loss
    batch_trajs: list = []
    collate = trainer_module.collate

    def remembering_collate(trajs, *args, **kwargs):
        batch_trajs[:] = list(trajs)
        return collate(trajs, *args, **kwargs)

    trainer_module.collate = remembering_collate

    def wrapped(method, student, teacher, targets, rows, active, signal, *args, **kwargs):
        for row in range(active.shape[0]):
            at = (rows == row).nonzero().squeeze(-1)
            if bool(active[row]) and at.numel():
                with torch.no_grad():
                    shifts = (gather_token_logprobs(teacher[at], targets[at])
                              - gather_token_logprobs(student[at], targets[at])).float()
                    gap = (entropy(teacher[at]) - entropy(student[at])).mean()
                record.append((float(signal[row]), float(shifts.mean()), float(gap),
                               *rule_shift(batch_trajs, row, shifts, tokenizer)))
        return original(method, student, teacher, targets, rows, active, signal, *args, **kwargs)

    return wrapped


def rule_shift(batch_trajs: list, row: int, shifts: torch.Tensor, tokenizer) -> tuple:
    """(mean shift on the row's rule-deciding tokens, "prerequisite"/"gated"), or (None, None)."""
    if tokenizer is None or row >= len(batch_trajs):
        return None, None
    traj = batch_trajs[row]
    if sum(traj.action_mask) != shifts.numel():
        return None, None
    found = decision_tokens(traj, tokenizer)
    if found is None:
        return None, None
    positions, label = found
    return float(shifts[positions].mean()), label


def same_org_retrieval(provider, pool: int = SAME_ORG_POOL):
    """A ``retrieve_texts`` for ``provider`` that keeps, per task, the J nearest of its ``pool``
    nearest experiences whose text names the task's organisation."""
    from lopd.envs.toolworld.rules_orgs import ORGS

    original = type(provider).retrieve_texts

    def retrieve(tasks, step):
        j, provider.j = provider.j, pool
        try:
            found = original(provider, tasks, step)
        finally:
            provider.j = j
        kept = []
        for task, texts in zip(tasks, found):
            org = ORGS.get(task.metadata.get("org", ""))
            kept.append([t for t in texts if org is None or org.name in t][:j])
        return kept

    return retrieve


def same_org_share(trajs, context) -> list[float]:
    """Per retrieved experience of ``context``, 1.0 when its text names the task's organisation."""
    from lopd.envs.toolworld.rules_orgs import ORGS

    texts = getattr(context, "texts", None) or []
    if len(texts) == len(trajs):
        tasks = [t.task for t in trajs]
    else:  # one row per group, in order of first appearance
        groups = list(dict.fromkeys(t.group for t in trajs))
        tasks = [next(t.task for t in trajs if t.group == g) for g in groups]
    found = []
    for task, block in zip(tasks, texts):
        org = ORGS.get(task.metadata.get("org", ""))
        if org is not None:
            found += [float(org.name in text) for text in block]
    return found


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
            "delta": [delta, delta_se], "entropy_gap": [gap, gap_se],
            "rule_tokens": summarize_rule_tokens(rows)}


def summarize_rule_tokens(rows: list[tuple]) -> dict:
    """Over the rows with rule-deciding tokens (element 3 not None): their count, Delta on those
    tokens (mean of (2r - 1) x shift), and the mean shift where the call named the prerequisite
    and where it named the gated tool, each (mean, SE)."""
    ruled = [r for r in rows if len(r) > 4 and r[3] is not None]
    by_label = {label: mean_se([r[3] for r in ruled if r[4] == label])
                for label in ("prerequisite", "gated")}
    return {"rows": len(ruled),
            "prerequisite_rows": sum(r[4] == "prerequisite" for r in ruled),
            "delta": list(mean_se([r[0] * r[3] for r in ruled])),
            "shift_prerequisite": list(by_label["prerequisite"]),
            "shift_gated": list(by_label["gated"])}


@contextlib.contextmanager
def forward_only(trainer):
    """The trainer's update with its forwards only: no autograd graph, ``backward`` a no-op and
    no composer backward. The recorded shifts are the same numbers (the forwards do not change);
    the backward was about half of a LOPD update's time."""
    backward = torch.Tensor.backward
    composer_backward = trainer.rt.composer_backward
    torch.Tensor.backward = lambda *args, **kwargs: None
    trainer.rt.composer_backward = lambda *args, **kwargs: 0.0
    try:
        with torch.no_grad():
            yield
    finally:
        torch.Tensor.backward = backward
        trainer.rt.composer_backward = composer_backward


def score(trainer, trajs, step: int, contexts: list[str], record: list,
          shares: dict[str, list] | None = None, with_backward: bool = False) -> dict[str, list]:
    """Re-score one step's rollouts under each context through the trainer's own update (no
    optimiser step; forwards only unless ``with_backward``); the recorded (signal, shift, ...)
    rows. With ``shares``, each context's same-organisation flags of its retrieved experiences
    are added."""
    found: dict[str, list] = {}
    for name in contexts:
        override, allow_self = CONTEXTS[name]
        if override is not None:
            apply(trainer.config, parse_overrides([override]))
        provider = getattr(trainer.rt, "provider", None)
        if allow_self is not None:
            provider.allow_self = allow_self
        if provider is not None:  # the -org contexts filter retrieval; the others do not
            provider.retrieve_texts = (same_org_retrieval(provider) if name.endswith("-org")
                                       else type(provider).retrieve_texts.__get__(provider))
        record.clear()
        context = trainer.rt.context(trajs, step)
        if shares is not None:
            shares.setdefault(name, []).extend(same_org_share(trajs, context))
        with contextlib.nullcontext() if with_backward else forward_only(trainer):
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
    parser.add_argument("--keep-run", default="",
                        help="run directory to build in and keep (phi_0 and the bank, seed rows plus "
                             "the scored steps' successes, for a later --from-run); default: "
                             "a temporary one")
    parser.add_argument("--with-backward", action="store_true",
                        help="run each re-scoring update's backward too (the measurements before "
                             "this option did; the shifts are the same, the time about double)")
    parser.add_argument("--name", default="teacher_privilege")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args(argv)
    contexts = args.contexts.split(",")
    unknown = sorted(set(contexts) - set(CONTEXTS))
    if unknown:
        parser.error(f"--contexts: unknown {unknown}; choose from {sorted(CONTEXTS)}")
    record: list = []
    per_context: dict[str, list] = {name: [] for name in contexts}
    shares: dict[str, list] = {}
    steps = [int(s) for s in args.steps.split(",")]
    cpu = cpu_line()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.keep_run) if args.keep_run else Path(tmp) / "run"
        trainer = build(args, run_dir)
        trainer_module.distill_loss = recording_distill_loss(record, trainer.rt.tokenizer)
        setup = time.perf_counter() - started
        trainer.rt.optimizer_step = lambda: None  # every step scores the warm start
        report_file = run_dir / "coldstart.json"
        coldstart = json.loads(report_file.read_text()) if report_file.exists() else {}
        coldstart.pop("train_losses", None)
        rewards = []
        for step in steps:
            trajs = trainer.rt.rollout(trainer.sample_tasks(step), step)
            rewards += [t.reward for t in trajs]
            trainer.rt.update_bank(trajs, step)
            for name, pairs in score(trainer, trajs, step, contexts, record, shares,
                                     args.with_backward).items():
                per_context[name] += pairs
            print(f"step {step}: reward {statistics.fmean(t.reward for t in trajs):.3f}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
            result = {  # written after every step: a stopped run keeps what it scored
                "command": command_line("benchmarks.teacher_privilege", args), "cpu": cpu,
                "setup_seconds": round(setup, 1),
                "seconds": round(time.perf_counter() - started, 1), "rollouts": len(rewards),
                "steps_scored": steps[: steps.index(step) + 1],
                "mean_reward": statistics.fmean(rewards), "coldstart": coldstart,
                **summaries(per_context, shares)}
            write_results(args, result)
    print((Path(args.results_dir) / f"{args.name}.md").read_text())


def summaries(per_context: dict[str, list], shares: dict[str, list]) -> dict:
    """The result's per-context summaries and same-organisation shares so far."""
    return {"contexts": {name: summarize(pairs) for name, pairs in per_context.items()},
            "same_org_share": {name: list(mean_se(flags)) + [len(flags)]
                               for name, flags in shares.items() if flags}}


def write_results(args, result: dict) -> None:
    """``NAME.json`` and ``NAME.md`` under ``--results-dir``."""
    out = Path(args.results_dir)
    (out / args.name).parent.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{args.name}.md").write_text(report(args, result))


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
        (f"Variant `{args.variant}`, seed {args.seed}, the tasks of steps "
         f"{','.join(map(str, result['steps_scored']))}: "
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
        "|---|---|---|---|---|---|---|", *rows, "", *rule_report(result)])


def rule_report(result: dict) -> list[str]:
    """The rule-token table and the same-organisation share (rules suites only)."""
    ruled = {n: s["rule_tokens"] for n, s in result["contexts"].items()
             if s.get("rule_tokens", {}).get("rows")}
    if not ruled:
        return []
    rows = [f"| {name} | {r['rows']} ({r['prerequisite_rows']} prerequisite) | {_pm(r['delta'])} | "
            f"{_pm(r['shift_prerequisite'])} | {_pm(r['shift_gated'])} | "
            f"{_share(result, name)} |" for name, r in ruled.items()]
    return [
        ("On the tokens a rule decides (`benchmarks.rule_tokens`: the tool name of a rollout's "
         "first call to a prerequisite or a gated tool of a rule its task meets): Delta there, "
         "and the shift where that call named the prerequisite (a privileged teacher raises it) "
         "and where it named the gated tool (a privileged teacher lowers it). Same-org share: "
         "retrieved experiences from the task's own organisation."), "",
        ("| context | rollouts with such a call | Delta on rule tokens | shift, prerequisite | "
         "shift, gated | same-org share |"), "|---|---|---|---|---|---|", *rows, ""]


def _share(result: dict, name: str) -> str:
    share = result.get("same_org_share", {}).get(name)
    return f"{share[0]:.2f} ({share[2]})" if share else "-"


if __name__ == "__main__":
    main()
