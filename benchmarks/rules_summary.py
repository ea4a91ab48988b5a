"""The business-rules results in one file: `benchmarks/results/rules/summary.json`.

Gathers what has been measured on the rules suites (``lopd.envs.toolworld.rules``) and writes
null for what has not run yet:

- the warm start's greedy success on the 200 ``toolworld-rules-test`` tasks (the ``suites``
  entry of its learning summary: ``python -m benchmarks.learning suites --variants warm-start
  --suites toolworld-rules-test``), and on the plain ``toolworld-test`` for comparison;
- the teacher's margin Delta at the warm start per context (``PRIVILEGE_FILES``), over all
  sampled tokens and on the tokens a rule decides;
- the reading probe (``benchmarks.rules_probe``) of each warm start: same-rule minus
  other-organisation context on the prerequisite's name;
- the efficiency comparison (``python -m benchmarks.learning run --rules``) from the
  experience-reading warm start (``COMPARED_WARM``): each method's final held-out success
  pooled over its seeds, and LOPD's share of GRPO's budget to reach GRPO's final success
  (``benchmarks.learning_report.first_reaching`` on the pooled curves).

    .venv/bin/python -m benchmarks.rules_summary
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmarks.learning_report import first_reaching, pooled, pooled_points, warm_starts
from benchmarks.learning_variants import SETTING
from benchmarks.rules_probe import summarize
from lopd.evaluate import standard_error

RESULTS = Path(__file__).parent / "results"
RULES = RESULTS / "rules"
WARM_SUMMARY = RESULTS / "learning" / "warm-start-s0-w890b506a3967.json"
COMPARED_WARM = "2d9895523cba"
"""The experience-reading warm start (``rules/icl-warm-start-adapter``) the methods start from:
the plain one's teacher does not read rules from its context (README.md)."""
COMPARED_LR = "lr2e-4"
"""GRPO's step size on these suites (lr 5e-4 collapsed it; README.md), used for every method."""
METHODS = {key: SETTING.replace("lr5e-4", COMPARED_LR).join((f"{name}-", suffix))
           for key, name, suffix in (("grpo", "grpo", ""), ("lopd", "lopd", ""),
                                     ("lopd_text", "lopd", "-text"),
                                     ("lopd_diverse", "lopd", "-diverse"),
                                     ("lopd_diverse_m0", "lopd", "-diverse-m0"),
                                     ("skill_sd", "skill-sd", ""))}


def _stats(runs: list[dict]) -> dict | None:
    """Success (per-task means pooled over the runs' seeds) and its SE over tasks."""
    per_task = list(pooled(runs).values())
    if not per_task:
        return None
    return {"success": sum(per_task) / len(per_task), "se": standard_error(per_task)}


def _point(prefix: str, success: float | None, se: float | None, seeds: int | None) -> dict:
    return {prefix: success, f"{prefix}_se": se, f"{prefix}_seeds": seeds}


def warm_start_fields() -> dict:
    """The compared (experience-reading) warm start on rules-test, and the plain one on
    rules-test and on the plain test (from its learning summary)."""
    data = json.loads(WARM_SUMMARY.read_text()) if WARM_SUMMARY.exists() else {}
    suites = data.get("suites", {})
    fields = {}
    for key, suite in (("plain_warm_start_success", "toolworld-rules-test"),
                       ("plain_warm_start_plain_test_success", "toolworld-test")):
        entry = suites.get(suite)
        stats = _stats([{"heldout": entry}]) if entry else None
        fields.update(_point(key, stats["success"] if stats else None,
                             stats["se"] if stats else None, 1 if entry else None))
        fields[f"{key}_n"] = entry["n"] if entry else None
    compared = RULES / "learning" / f"warm-start-s0-w{COMPARED_WARM}.json"
    entry = json.loads(compared.read_text())["heldout"] if compared.exists() else None
    stats = _stats([{"heldout": entry}]) if entry else None
    fields.update(_point("warm_start_success", stats["success"] if stats else None,
                         stats["se"] if stats else None, 1 if entry else None))
    return fields


def probe_fields() -> dict:
    """Same-rule minus other-organisation shift on the prerequisite's name, per warm start."""
    fields = {}
    for key, name in (("plain", "rules_probe"), ("reading", "rules_probe_icl")):
        path = RULES / f"{name}.json"
        rows = json.loads(path.read_text())["rows"] if path.exists() else []
        found = summarize(rows).get("same-rule - other-org/rule_tokens") if rows else None
        fields[f"probe_{key}_warm_start_same_rule_minus_other_org"] = found[0] if found else None
        fields[f"probe_{key}_warm_start_same_rule_minus_other_org_se"] = found[1] if found else None
    return fields


ALL_CONTEXTS = (("latent", "latent"), ("text", "text"), ("latent_org", "latent-org"),
                ("text_org", "text-org"))
PRIVILEGE_FILES = {"": (("teacher_privilege_icl", "teacher_privilege_icl_latent"), ALL_CONTEXTS),
                   "_plain": (("teacher_privilege",), ALL_CONTEXTS),
                   "_diverse": (("teacher_privilege_icl_diverse",), ALL_CONTEXTS[::2])}
"""Where Delta comes from: the compared (experience-reading) warm start's runs of
``benchmarks.teacher_privilege`` (text and latent contexts in two files), the plain warm
start's (fields suffixed ``_plain``), and the latents of the diverse cold start's phi_0
(``_diverse``: the ``-diverse`` variant's cache)."""


def privilege_fields() -> dict:
    """Delta at each warm start per context, whole trajectories and rule-deciding tokens."""
    fields = {}
    for suffix, (names, wanted) in PRIVILEGE_FILES.items():
        contexts = {}
        for name in names:
            path = RULES / f"{name}.json"
            contexts.update(json.loads(path.read_text())["contexts"] if path.exists() else {})
        for key, context in wanted:
            found = contexts.get(context)
            delta = found["delta"] if found else [None, None]
            rule = (found["rule_tokens"]["delta"] if found and found.get("rule_tokens")
                    else [None, None])
            for field, value in ((f"delta_{key}{suffix}_warm_start", delta),
                                 (f"delta_{key}_rule_tokens{suffix}_warm_start", rule)):
                fields[field], fields[f"{field}_se"] = (  # NaN: no rollout had such a token
                    None if v is None or math.isnan(v) else v for v in value)
    return fields


def comparison_fields() -> dict:
    """Final held-out success per method (pooled over seeds) and LOPD's share of GRPO's budget."""
    out = RULES / "learning"
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))] if out.exists() else []
    warm = warm_starts(summaries).get(COMPARED_WARM)
    fields, curves = {}, {}
    for key, name in METHODS.items():
        runs = [s for s in summaries if s["name"] == name and s.get("warm_start") == COMPARED_WARM]
        stats = _stats(runs) if runs else None
        fields.update(_point(f"{key}_final_success", stats["success"] if stats else None,
                             stats["se"] if stats else None, len(runs) or None))
        curves[key] = pooled_points(runs, warm) if runs else []
    for key in ("lopd", "lopd_text", "lopd_diverse", "lopd_diverse_m0"):
        share = None
        if curves["grpo"] and curves[key]:
            budget, target = curves["grpo"][-1][0], curves["grpo"][-1][1]
            reached = first_reaching(curves[key], target)
            share = reached / budget if reached is not None and budget else None
        fields[f"{key}_share_of_grpo_budget"] = share
    return fields


def main() -> None:
    summary = {**warm_start_fields(), **probe_fields(), **privilege_fields(),
               **comparison_fields(),
               "notes": ("null: not run yet. The methods start from the experience-reading "
                         f"warm start ({COMPARED_WARM}) at LoRA {COMPARED_LR}. "
                         "Success: greedy, 200 toolworld-rules-test tasks "
                         "(SE over tasks; pooled over seeds for the methods). Delta: eq. 12 at "
                         "the compared warm start (_plain: the plain one), SE over rollouts. "
                         "lopd_: latents from the default cold start, whose phi_0 is one "
                         "input-blind soft prompt on these suites, so the latent LOPD runs "
                         "use the diverse cold start (lopd_diverse_); see README.md.")}
    RULES.mkdir(parents=True, exist_ok=True)
    (RULES / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
