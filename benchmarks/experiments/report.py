"""RESULTS.md from the experiment records: every table and plot with the exact command, seeds,
budget and wall time; a "Conclusions (computed)" section that states facts read off the
numbers (no interpretation); and a human-written section between two markers that is kept
verbatim when the file is regenerated.
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.experiments.analysis import BEHAVIOUR_KEYS, TIME_KEYS
from benchmarks.experiments.plan import LABELS

HUMAN_START = "<!-- human-notes:start -->"
HUMAN_END = "<!-- human-notes:end -->"
DEFAULT_HUMAN = ("_Interpretation by a person goes here. `report` keeps everything between "
                 "these two markers when it regenerates this file._")
TITLES = {"efficiency": "1. Learning efficiency", "methods": "2. Method table",
          "ablations": "3. Ablations", "behaviour": "4. Behaviour before vs after training",
          "cost": "5. Cost: step time and peak memory"}
PAPER = {
    "efficiency": "Paper: LOPD passes GRPO's and Skill-SD's final reward with under 30% of "
                  "their rollouts (0.61 after 320 generations; GRPO 0.611, Skill-SD 0.588 "
                  "after 1600).",
    "ablations": "Paper (review): m=0 0.551, m<=0.01 no better, m=0.05 0.637, frozen "
                 "composer 0.573 (final task performance; not comparable to the proxies here).",
    "behaviour": "Paper (EnvScaler test set): tool calls per step 3.5 -> 1.11, interaction "
                 "steps 11.12 -> 17.04, first-response length -37.5%, reward per tool call "
                 "0.038 -> 0.050.",
}


def fmt(s: dict | None, digits: int = 3) -> str:
    if not s:
        return "-"
    if s["n"] == 1:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"


def num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def share(x: float | None) -> str:
    return "not reached" if x is None else f"{x:.0%}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *["| " + " | ".join(r) + " |" for r in rows], ""]


def provenance(record: dict) -> list[str]:
    b = record["budget"]
    lines = [f"Command: `{record['command']}`", ""]
    if b:
        adapter = f", warm start `{b['init_adapter']}`" if b["init_adapter"] else ""
        evals = ", ".join(f"{s} ({n} tasks)" for s, n in b["eval_tasks"].items()) or "none"
        lines.append(
            f"Seeds: {', '.join(map(str, record['seeds']))}. Budget per run: {b['steps']} "
            f"steps x {b['tasks_per_step']} tasks x {b['group_size']} rollouts = "
            f"{b['rollouts_per_run']} rollouts; up to {b['max_turns']} turns of "
            f"{b['max_new_tokens']} new tokens. Model `{b['model']}` ({b['dtype']}, "
            f"{b['threads']} threads){adapter}. Held-out eval (greedy): {evals}.")
    lines += ["", (f"Wall time: {record['compute_s'] / 60:.1f} min (sum of the runs it reads; "
                  f"runs shared with other experiments count in each). Generated "
                  f"{record['generated']}.")]
    if record["missing"]:
        lines += ["", f"**Missing runs** (not run yet): {', '.join(record['missing'])}."]
    return lines + [""]


def _image(record: dict, out: Path, report: Path) -> list[str]:
    return [f"![{name}]({os.path.relpath(out / name, report.parent)})" for name in
            record.get("plots", [])] + [""]


# -- sections ------------------------------------------------------------------------------------
def efficiency_section(record: dict) -> list[str]:
    data = record["data"]
    curves = data["curves"]
    if not curves:
        return ["_No runs yet._", ""]
    methods = list(curves)
    n = min(len(c["rollouts"]) for c in curves.values())
    rows = [[str(curves[methods[0]]["rollouts"][i])] +
            [fmt({"mean": curves[m]["mean"][i], "min": curves[m]["min"][i],
                  "max": curves[m]["max"][i], "n": len(curves[m]["per_seed"])})
             for m in methods] for i in range(n)]
    rows.append([f"final, smoothed ({data['window']} steps)"] +
                [num(curves[m]["smoothed"][-1]) for m in methods])
    lines = ["Mean train reward over the step's rollouts, mean [min, max] over seeds:", ""]
    lines += _table(["rollouts"] + [LABELS[m] for m in methods], rows)
    for ref, s in data["share"].items():
        per_seed = ", ".join(f"seed {k}: {share(v)}" for k, v in s["per_seed"].items())
        lines.append(f"- Share of {LABELS[ref]}'s budget LOPD needs to reach {LABELS[ref]}'s "
                     f"final smoothed reward ({s['threshold']:.3f}): **{share(s['share'])}** "
                     f"(of {s['budget']} rollouts; per seed against the same seed's "
                     f"{LABELS[ref]}: {per_seed}).")
    return lines + ["", PAPER["efficiency"], ""]


def methods_section(record: dict) -> list[str]:
    lines = []
    for preset, rows in record["data"].items():
        suites = sorted({s for r in rows for s, v in r["suites"].items() if v})
        cats = {s: sorted({c for r in rows if r["suites"].get(s)
                           for c in r["suites"][s]["by_category"]}) for s in suites}
        head = ["method", "seeds", "rollouts"]
        for s in suites:
            metric = "pass@1" if s == "humaneval" else "success"
            head += [f"{s} {metric}", f"{s} reward"] + [f"{s}: {c}" for c in cats[s]]
        head.append("final train reward")
        body = []
        for r in rows:
            cells = [r["label"], ",".join(map(str, r["seeds"])), str(r["rollouts"])]
            for s in suites:
                v = r["suites"].get(s)
                cells += [fmt(v["success"]) if v else "-", fmt(v["reward"]) if v else "-"]
                cells += [fmt(v["by_category"].get(c)) if v else "-" for c in cats[s]]
            cells.append(fmt(r["train_reward_final"]))
            body.append(cells)
        lines += [f"**Preset: {preset}**", ""] + _table(head, body)
    return lines or ["_No runs yet._", ""]


def ablations_section(record: dict) -> list[str]:
    rows = record["data"]["rows"]
    head = ["variant", "m", "K", "J", "composer", "context", "rollouts", "mean Delta",
            "final beta", "mean distill", "train reward", "NLL no ctx", "NLL phi_0",
            "NLL final ctx", "held-out success", "wall s"]
    body = [[r["label"], f"{r['margin']:g}", str(r["K"]), str(r["J"]), r["composer"],
             r["context"], str(r["rollouts"]), num(r["delta_mean"], 4), num(r["beta_final"], 4),
             num(r["distill_mean"], 4), num(r["reward_mean"]), num(r["nll_no_context"]),
             num(r["nll_phi0"]), num(r["nll_after"]), num(r["success"]), f"{r['wall_s']:.0f}"]
            for r in rows]
    return [
        ("At this budget the held-out success of an ablation run cannot separate variants, so "
        "the table reports **proxies** of what each ablation is about: the privilege Delta "
        "(eq. 12, what the margin m constrains) and the dual variable beta over the run, and "
        "the teacher's NLL per action token on the cold start's held-out examples without "
        "context, with phi_0's latent context, and with the run's final context (trained "
        "composer; phi_0 when frozen; the text block for the text variant). Lower NLL = more "
        "informative privileged context. Each K/J value has its own cold start. beta starts "
        "at 0, so the margin first changes the update of the second step: the m variants "
        "share their first step exactly, and Delta can differ from the third step on."), "",
        *_table(head, body), PAPER["ablations"], ""]


def behaviour_section(record: dict) -> list[str]:
    data = record["data"]
    head = ["policy", "seeds", *[k.replace("_", " ") for k in BEHAVIOUR_KEYS], "success"]
    body = [[r["label"], ",".join(map(str, r["seeds"])),
             *[fmt(r[k], 2 if k != "reward_per_tool_call" else 3) for k in BEHAVIOUR_KEYS],
             fmt(r["success"])] for r in data["rows"]]
    train = [[f"LOPD train rollouts, {when}", "",
              *[fmt(v[k], 2 if k != "reward_per_tool_call" else 3) for k in BEHAVIOUR_KEYS], ""]
             for when, v in data["lopd_train"].items()]
    return [("Held-out ToolWorld episodes (greedy), mean [min, max] over seeds; the last rows "
            "are LOPD's sampled training rollouts."), "", *_table(head, body + train),
            PAPER["behaviour"], ""]


def cost_section(record: dict) -> list[str]:
    rows = record["data"]["rows"]
    head = ["method", "steps", *[f"{k} s" for k in TIME_KEYS], "x GRPO", "peak RSS MB",
            "one-off setup s"]
    body = [[r["label"], str(r["steps"]), *[fmt(r["time"][k], 1) for k in TIME_KEYS],
             num(r["ratio_vs_grpo"], 2), fmt(r["peak_rss_mb"], 0), fmt(r["setup_s"], 0)]
            for r in rows]
    method = rows[0]["peak_rss_method"] if rows else ""
    return [("Mean [min, max] over all training steps of all seeds. `teacher` is the teacher "
            "forward inside `update` (reported apart); LOPD's one-off setup is bank seeding + "
            f"composer cold start (cached and shared by its runs). Peak RSS: {method}."), "",
            *_table(head, body)]


SECTIONS = {"efficiency": efficiency_section, "methods": methods_section,
            "ablations": ablations_section, "behaviour": behaviour_section,
            "cost": cost_section}
