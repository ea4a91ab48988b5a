"""Can the warm start read a business rule from another task's success shown as text?

A teacher-forced probe, cheaper and sharper than on-policy rollouts
(``benchmarks.teacher_privilege``): for each ``toolworld-rules-test`` task whose reference
solution makes a prerequisite call (``verify_identity`` before ``withdraw``, ...), the warm
start scores that reference with and without a text context, inserted exactly as LOPD's text
ablation inserts it (``lopd.runtime.experience_text_message`` after the prompt, through
``lopd.teacher.teacher_logits``). The context holds J condensed training successes
(``lopd.experience.condense``, cut to ``method.experience_chars``), one of:

- ``same-rule``: successes of the task's own organisation that meet the same rule;
- ``same-org``: successes of the task's own organisation that meet none of its rules;
- ``other-org``: successes of the other training organisation of the same domain (control:
  the same tools, other rules);
- ``rule-text``: no experience, the organisation's rules stated as plain sentences ("Northwind
  Bank policy: withdrawals of $200 or more need verify_identity on the account"), the most a
  context can say (an upper bound on what reading experience could give);
- ``other-rule-text``: the other training organisation's rules stated the same way (control).

Per context it reports, over tasks, the shift ``log pT - log pS`` on the rule-deciding tokens
(the prerequisite's name, ``benchmarks.rule_tokens``), on the gated tool's name at the same
position (how much less likely the rule-blind call becomes), and over all action tokens.

    .venv/bin/python -m benchmarks.rules_probe --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.bench_throughput import cpu_line
from benchmarks.learning import WARM_ADAPTER
from benchmarks.rule_tokens import decision_names, decision_tokens
from lopd.batch import collate, gather_token_logprobs
from lopd.evaluate import standard_error

RESULTS = Path(__file__).parent / "results" / "rules"
CONTEXTS = ("same-rule", "same-org", "other-org", "rule-text", "other-rule-text")
PAIRS = (("same-rule", "other-org"), ("rule-text", "other-rule-text"))
"""(context, its control): the paired differences the summary reports (the reading test)."""
SELECTED = list(CONTEXTS)
"""The contexts this run probes (``--contexts``)."""
DTYPE = ["auto"]
"""The ``model.dtype`` setting the forwards run under (``--dtype``; auto: bf16 autocast on a
CPU with native bf16, as the evaluations here)."""


def experiences(tasks, renderer, chars: int) -> dict[str, list[tuple[set, str]]]:
    """org -> [(rules met, condensed trace)] of training reference solutions."""
    from lopd.experience.condense import experience_from_trajectory
    from lopd.reference import reference_trajectory

    found: dict[str, list[tuple[set, str]]] = {}
    for task in tasks:
        traj = reference_trajectory(task, renderer, 6)
        if traj.success:
            trace = experience_from_trajectory(traj, step=0, source="seed").trace[:chars]
            found.setdefault(task.metadata["org"], []).append((set(task.metadata["rules"]), trace))
    return found


def pick(task, bank, kind: str, j: int) -> list[str]:
    """J experience texts of ``kind`` for ``task`` (module docstring)."""
    from lopd.envs.toolworld.rules_orgs import ORGS

    org = task.metadata["org"]
    rules = set(task.metadata["rules"])
    other = next(k for k, o in ORGS.items() if o.domain == task.domain and k != org
                 and o.split == "train")
    if kind in ("rule-text", "other-rule-text"):
        stated = ORGS[org if kind == "rule-text" else other]
        return [f"{stated.name} policy: " + "; ".join(r.text for r in stated.rules) + "."]
    if kind == "same-rule":
        rows = [t for met, t in bank[org] if met & rules]
    elif kind == "same-org":
        rows = [t for met, t in bank[org] if not met]
    else:
        rows = [t for _, t in bank[other]]
    return rows[:j]


def logprobs(model, renderer, traj, texts: list[str] | None, pad_id: int) -> torch.Tensor:
    """Per action token of ``traj``, its log-probability under the warm start, teacher-forced,
    with ``texts`` as LOPD's text context (None: no context)."""
    from lopd.models import autocast_context
    from lopd.runtime import experience_text_message
    from lopd.teacher import pad_context_ids, teacher_logits

    batch = collate([traj], pad_id)
    targets = batch.targets[batch.target_mask]
    context = mask = None
    if texts:
        ids = renderer.render_message(experience_text_message(texts))[0]
        context, mask = pad_context_ids([ids], pad_id)
    with torch.no_grad(), autocast_context(DTYPE[0]):
        logits = teacher_logits(model, batch, context, mask, positions="supervised")
    return gather_token_logprobs(logits.float(), targets)


def swapped(renderer, traj, gated: str):
    """``traj`` with its prerequisite call renamed to the gated tool (the rule-blind choice at
    the same place), and that call's name positions; None when it cannot be found."""
    from dataclasses import replace

    needs, _ = decision_names(traj.task)
    need = next(iter(needs))
    messages = [dict(m) for m in traj.messages]
    for message in messages:
        if message["role"] == "assistant" and f'"{need}"' in message["content"]:
            message["content"] = message["content"].replace(f'"{need}"', f'"{gated}"', 1)
            break
    ids, mask = renderer.render(messages)
    other = replace(traj, input_ids=ids, action_mask=mask, turn_spans=_spans(mask))
    found = decision_tokens(other, renderer.tokenizer)
    return (other, found[0]) if found is not None else None


def gated_after_prerequisite(task) -> str:
    """The gated tool the reference calls after its first prerequisite call."""
    import re

    needs, gated = decision_names(task)
    names = re.findall(r'"name": "([a-z_]+)"', task.reference)
    first = next(i for i, name in enumerate(names) if name in needs)
    return next((name for name in names[first + 1:] if name in gated), min(gated))


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for index, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            spans.append((start, index))
            start = None
    return spans


def probe_task(model, renderer, task, bank, j: int, pad_id: int) -> dict | None:
    """The three contexts' shifts for one task (None without a prerequisite decision)."""
    from lopd.reference import reference_trajectory

    traj = reference_trajectory(task, renderer, 6)
    found = decision_tokens(traj, renderer.tokenizer)
    if found is None or found[1] != "prerequisite":
        return None
    positions = found[0]
    blind = swapped(renderer, traj, gated_after_prerequisite(task))
    plain = logprobs(model, renderer, traj, None, pad_id)
    blind_plain = logprobs(model, renderer, blind[0], None, pad_id) if blind else None
    row = {"task": task.id, "org": task.metadata["org"], "rules": task.metadata["rules"],
           "logp_prerequisite": float(plain[positions].sum()),
           "logp_gated": float(blind_plain[blind[1]].sum()) if blind else None}
    for kind in SELECTED:
        texts = pick(task, bank, kind, j)
        if not texts:
            continue
        values = logprobs(model, renderer, traj, texts, pad_id) - plain
        gated_shift = None
        if blind:
            gated_shift = float((logprobs(model, renderer, blind[0], texts, pad_id)
                                 - blind_plain)[blind[1]].mean())
        row[kind] = {"rule_tokens": float(values[positions].mean()), "all": float(values.mean()),
                     "gated": gated_shift}
    return row


def summarize(rows: list[dict]) -> dict:
    """Per context and measure: [mean over tasks, SE, tasks]; and the warm start's own
    log-probability (nats, summed over the name's tokens) of the prerequisite and of the gated
    tool at the decision point."""
    out = {}
    for key in ("logp_prerequisite", "logp_gated"):
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = [statistics.fmean(values), standard_error(values), len(values)] if values else None
    for kind in SELECTED:
        for key in ("rule_tokens", "gated", "all"):
            values = [r[kind][key] for r in rows if kind in r and r[kind][key] is not None]
            out[f"{kind}/{key}"] = ([statistics.fmean(values), standard_error(values), len(values)]
                                    if values else None)
    for shown, control in PAIRS:
        for key in ("rule_tokens", "gated", "all"):
            diffs = [r[shown][key] - r[control][key] for r in rows if shown in r and control in r
                     and r[shown][key] is not None and r[control][key] is not None]
            if diffs:
                out[f"{shown} - {control}/{key}"] = [statistics.fmean(diffs),
                                                     standard_error(diffs), len(diffs)]
    return out


def main(argv: list[str] | None = None) -> None:
    from lopd.chat import ChatRenderer
    from lopd.envs import load_suite
    from lopd.models import load_model, load_tokenizer

    parser = argparse.ArgumentParser(prog="python -m benchmarks.rules_probe",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", default=str(WARM_ADAPTER))
    parser.add_argument("--j", type=int, default=3)
    parser.add_argument("--chars", type=int, default=600, help="method.experience_chars")
    parser.add_argument("--bank-tasks", type=int, default=600, help="training tasks drawn on")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--limit", type=int, default=40, help="test tasks probed (0 = all)")
    parser.add_argument("--contexts", default=",".join(CONTEXTS), help="which contexts")
    parser.add_argument("--name", default="rules_probe", help="results file name (.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    DTYPE[0] = args.dtype
    SELECTED[:] = args.contexts.split(",")
    unknown = sorted(set(SELECTED) - set(CONTEXTS))
    if unknown:
        parser.error(f"--contexts: unknown {unknown}; choose from {list(CONTEXTS)}")
    started = time.perf_counter()
    tokenizer = load_tokenizer()
    renderer = ChatRenderer(tokenizer)
    model = load_model(dtype=args.dtype, init_adapter=args.adapter)[0].eval()
    bank = experiences(load_suite("toolworld-rules-train", n=args.bank_tasks), renderer, args.chars)
    pad_id = tokenizer.pad_token_id or 0
    rows = []
    for task in load_suite("toolworld-rules-test"):
        if args.limit and len(rows) >= args.limit:
            break
        row = probe_task(model, renderer, task, bank, args.j, pad_id)
        if row is not None:
            rows.append(row)
    command = " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": f"python -m benchmarks.rules_probe {command}".strip(),
              "cpu": cpu_line(), "seconds": round(time.perf_counter() - started, 1),
              "args": vars(args), "tasks": len(rows), "summary": summarize(rows), "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1), f"\n{len(rows)} tasks, {result['seconds']} s")


if __name__ == "__main__":
    main()
