"""Computed conclusions: facts read off the records, one bullet each, no interpretation; and
the RESULTS.md writer that puts sections, conclusions and the preserved human notes together.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.experiments import report as md
from benchmarks.experiments.plan import EXPERIMENTS, LABELS


def efficiency_facts(record: dict) -> list[str]:
    data, facts = record["data"], []
    for ref, s in data["share"].items():
        name = LABELS[ref]
        per_seed = ", ".join(f"seed {k} {md.share(v)}" for k, v in s["per_seed"].items())
        if s["share"] is None:
            text = (f"LOPD did not reach {name}'s final smoothed train reward ({s['threshold']:.3f})"
                    f" within the {s['budget']}-rollout budget (LOPD's own final: "
                    f"{s['lopd_final']:.3f}; per seed: {per_seed}).")
        else:
            text = (f"LOPD reached {name}'s final smoothed train reward ({s['threshold']:.3f}) "
                    f"after {s['reached_at']} rollouts = {md.share(s['share'])} of {name}'s "
                    f"{s['budget']} (per seed: {per_seed}).")
        if s["threshold"] <= 0:
            text += f" {name} never earned reward, so reaching it is trivial."
        elif s["at_first_step"] and s["threshold"] <= s["ref_first"] + 1e-12:
            text += (f" This is at the first step, before any update, and {name} ended no "
                     f"higher than its own first step ({s['ref_first']:.3f}): it says nothing "
                     f"about learning speed.")
        facts.append(text)
    if data["curves"]:
        facts.append("First-step train rewards are identical across methods (same starting "
                     "policy, same task and sampling seeds): "
                     f"{'yes' if data['same_first_step'] else 'no'}.")
    return facts


def methods_facts(record: dict) -> list[str]:
    facts = []
    for preset, rows in record["data"].items():
        suite = "humaneval" if preset == "code" else "toolworld-test"
        scored = {r["name"]: r["suites"][suite] for r in rows if r["suites"].get(suite)}
        if not scored:
            continue
        n = next(iter(scored.values()))["n"]
        top = max(v["success"]["mean"] for v in scored.values())
        best = [LABELS[k] for k, v in scored.items() if v["success"]["mean"] >= top - 1e-12]
        listing = ", ".join(f"{LABELS[k]} {md.fmt(v['success'])}" for k, v in scored.items())
        facts.append(f"{suite} ({n} tasks, one task = {1 / max(n, 1):.3f}): {listing}; highest "
                     f"mean: {' = '.join(best)}{' (tie)' if len(best) > 1 else ''}.")
        if "lopd" in scored:
            lopd = scored["lopd"]["success"]["mean"]
            for ref in ("vanilla", "grpo"):
                if ref in scored:
                    diff = lopd - scored[ref]["success"]["mean"]
                    facts.append(f"{suite}: LOPD - {LABELS[ref]} = {diff:+.3f} "
                                 f"({diff * n:+.1f} tasks).")
    return facts


def ablation_facts(record: dict) -> list[str]:
    rows = record["data"]["rows"]
    if not rows:
        return []
    facts = ["Mean privilege Delta per variant: " + ", ".join(
        f"{r['name']} {md.num(r['delta_mean'], 4)}" for r in rows) + "; final beta: " +
        ", ".join(f"{r['name']} {md.num(r['beta_final'], 4)}" for r in rows) + "."]
    probed = [r for r in rows if r["nll_after"] is not None]
    if probed:
        bottom = min(r["nll_after"] for r in probed)
        low = [r["name"] for r in probed if r["nll_after"] <= bottom + 5e-4]
        base = next((r["nll_no_context"] for r in rows if r["nll_no_context"] is not None), None)
        facts.append("Held-out teacher NLL with the final context: " + ", ".join(
            f"{r['name']} {r['nll_after']:.3f}" for r in probed) +
            f" (no context: {md.num(base)}); lowest (within 0.0005): {', '.join(low)}.")
    return facts


def behaviour_facts(record: dict) -> list[str]:
    rows = {r["name"]: r for r in record["data"]["rows"]}
    if "vanilla" not in rows or "lopd" not in rows:
        return []
    parts = []
    for key in ("tool_calls_per_step", "interaction_steps", "first_response_tokens",
                "reward_per_tool_call"):
        before, after = rows["vanilla"][key], rows["lopd"][key]
        if before and after:
            change = (f" ({(after['mean'] / before['mean'] - 1):+.0%})"
                      if before["mean"] else "")
            parts.append(f"{key.replace('_', ' ')} {before['mean']:.3f} -> "
                         f"{after['mean']:.3f}{change}")
    return ["Held-out, vanilla -> after LOPD (mean over seeds): " + "; ".join(parts) + "."]


def cost_facts(record: dict) -> list[str]:
    rows = {r["name"]: r for r in record["data"]["rows"]}
    if "lopd" not in rows:
        return []
    lopd = rows["lopd"]
    total = lopd["time"]["total"]["mean"]
    fact = f"LOPD step {total:.1f} s"
    if lopd["ratio_vs_grpo"] is not None:
        fact += (f" = {lopd['ratio_vs_grpo']:.2f}x GRPO's "
                 f"{rows['grpo']['time']['total']['mean']:.1f} s")
    teacher = (lopd["time"]["teacher"] or {}).get("mean", 0.0)
    fact += f"; its teacher forward takes {teacher / total:.0%} of the step" if total else ""
    if lopd["setup_s"]:
        fact += f"; one-off bank seeding + cold start {lopd['setup_s']['mean']:.0f} s"
    peaks = ", ".join(f"{LABELS[k]} {v['peak_rss_mb']['mean']:.0f} MB" for k, v in rows.items()
                      if v["peak_rss_mb"])
    return [fact + ".", f"Peak RSS per run: {peaks}."]


FACTS = {"efficiency": efficiency_facts, "methods": methods_facts,
         "ablations": ablation_facts, "behaviour": behaviour_facts, "cost": cost_facts}


def _human_notes(path: Path) -> str:
    if path.exists():
        text = path.read_text()
        if md.HUMAN_START in text and md.HUMAN_END in text:
            return text.split(md.HUMAN_START, 1)[1].split(md.HUMAN_END, 1)[0].strip("\n")
    return md.DEFAULT_HUMAN


def write_report(records: dict[str, dict], path: Path, out: Path, scale: str,
                 commands: dict[str, str], notes: tuple[str, ...], status: str = "") -> Path:
    """Render RESULTS.md (``path``) from ``records``; PNGs live in ``out``."""
    lines = [f"# Paper experiments at {scale} scale", "",
             (f"Generated by `{commands['report']}` from the JSON records in "
             f"`{_rel(out)}`; edit only the marked human section (regenerating keeps it)."),
             f"The whole sweep: `{commands['all']}`. {status}", "",
             ("Every experiment re-runs with its command; finished runs are skipped, a killed "
             "sweep resumes."), "", *[f"- {n}" for n in notes],
             ("- All methods start from the same checkpoint (\"vanilla\"), share the rollout "
             "engine, environments, masks and held-out protocol (greedy, eval seed 0), and get "
             "the same rollout budget."), ""]
    facts = []
    for name in EXPERIMENTS:
        lines += [f"## {md.TITLES[name]}", ""]
        record = records.get(name)
        if record is None:
            lines += [f"_Not run yet._ Run: `{commands[name]}`", ""]
            continue
        lines += md.provenance(record) + md.SECTIONS[name](record) + \
            md._image(record, out, path)
        facts += [f"- ({name}) {f}" for f in FACTS[name](record)]
    lines += ["## Conclusions (computed)", "",
              "Facts computed from the tables above by `report`; no interpretation.", "",
              *(facts or ["- No results yet."]), "",
              "## Interpretation (human-written)", "", md.HUMAN_START, _human_notes(path),
              md.HUMAN_END, ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _rel(path: Path) -> str:
    from benchmarks.experiments.scales import REPO

    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)
