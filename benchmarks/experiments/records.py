"""Experiment records: run results -> ``OUT/<experiment>.json`` (+ its PNG).

A record holds the aggregated data (``analysis``), the exact command that reproduces the
experiment, the seeds, the budget read from the runs' resolved configs, the compute time (sum
of the wall times of the runs it reads; runs shared between experiments count in each) and the
runs it read. ``report`` renders RESULTS.md from these records alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchmarks.experiments import analysis, plots
from benchmarks.experiments.plan import RunSpec, Settings, ablation_variants


def _by_name(specs: list[RunSpec], results: dict[str, dict | None], group: str) -> dict:
    out: dict[str, list[dict]] = {}
    for spec in specs:
        result = results.get(spec.key)
        if spec.group == group and result is not None:
            out.setdefault(spec.name, []).append(result)
    return out


def aggregate(experiment: str, st: Settings, specs: list[RunSpec],
              results: dict[str, dict | None]) -> dict:
    if experiment == "efficiency":
        return analysis.efficiency(_by_name(specs, results, "toolworld"))
    if experiment == "methods":
        return {preset: analysis.methods_table(_by_name(specs, results, preset))
                for preset in st.presets}
    if experiment == "ablations":
        found = {name: rs[0] for name, rs in _by_name(specs, results, "ablations").items()}
        return {"rows": analysis.ablations(found, ablation_variants(st))}
    if experiment == "behaviour":
        return analysis.behaviour(_by_name(specs, results, "toolworld"))
    if experiment == "cost":
        return {"rows": analysis.cost(_by_name(specs, results, "toolworld"))}
    raise ValueError(experiment)


def budget(results: list[dict]) -> dict:
    """The budget of the runs, read from the first training run's resolved config."""
    trained = [r for r in results if r["config"]["optim"]["steps"] > 0] or results
    if not trained:
        return {}
    cfg = trained[0]["config"]
    optim, rollout = cfg["optim"], cfg["rollout"]
    evals = {s: v["n"] for r in results for s, v in r.get("eval", {}).items()}
    return {"model": cfg["model"]["name"], "init_adapter": cfg["model"]["init_adapter"],
            "dtype": cfg["model"]["dtype"], "steps": optim["steps"],
            "tasks_per_step": optim["tasks_per_step"], "group_size": optim["group_size"],
            "rollouts_per_run": optim["steps"] * optim["tasks_per_step"] * optim["group_size"],
            "max_turns": rollout["max_steps"], "max_new_tokens": rollout["max_new_tokens"],
            "threads": cfg["run"]["threads"], "eval_tasks": evals}


def _plot(experiment: str, data: dict, st: Settings) -> list[str]:
    out, scale = st.out, st.scale.name
    if experiment == "efficiency" and data["curves"]:
        return [plots.efficiency(data, out / "efficiency.png",
                                 f"Train reward vs rollouts ({scale} scale)").name]
    if experiment == "methods":
        pngs = []
        for preset, rows in data.items():
            suite = "humaneval" if preset == "code" else "toolworld-test"
            if any(r["suites"].get(suite) for r in rows):
                pngs.append(plots.methods(rows, suite, out / f"methods-{preset}.png",
                                          f"{suite}, equal rollout budget ({scale})").name)
        return pngs
    if experiment == "ablations" and data["rows"]:
        return [plots.ablations(data["rows"], out / "ablations.png",
                                f"LOPD ablations ({scale})").name]
    if experiment == "behaviour" and data["rows"]:
        return [plots.behaviour(data, out / "behaviour.png",
                                f"Held-out behaviour before vs after training ({scale})").name]
    if experiment == "cost" and data["rows"]:
        return [plots.cost(data["rows"], out / "cost.png",
                           f"Step time and peak memory per method ({scale})").name]
    return []


def write_record(experiment: str, st: Settings, specs: list[RunSpec],
                 results: dict[str, dict | None], command: str, invocation_s: float) -> dict:
    found = [results[s.key] for s in specs if results.get(s.key) is not None]
    data = aggregate(experiment, st, specs, results)
    record = {
        "experiment": experiment, "scale": st.scale.name, "command": command,
        "invoked": " ".join(st.argv), "seeds": sorted({s.seed for s in specs}),
        "budget": budget(found),
        "compute_s": round(sum(r["timing"]["wall_s"] for r in found), 1),
        "invocation_s": round(invocation_s, 1),
        "runs": {s.key: results[s.key]["run_dir"] for s in specs if results.get(s.key)},
        "missing": [s.key for s in specs if results.get(s.key) is None],
        "notes": list(st.scale.notes), "data": data,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    st.out.mkdir(parents=True, exist_ok=True)
    record["plots"] = _plot(experiment, data, st)
    (st.out / f"{experiment}.json").write_text(json.dumps(record, indent=1))
    return record


def read_records(out: Path) -> dict[str, dict]:
    records = {}
    for path in sorted(Path(out).glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "experiment" in data:
            records[data["experiment"]] = data
    return records
