"""The numbers of every table, as pure functions of run results (``result.json`` dicts).

Spread over seeds is reported as the mean with the [min, max] range (2-3 seeds make a
standard deviation meaningless). Train reward curves are smoothed with a trailing running
mean over ``window`` steps before the "share of GRPO's budget" is read off: the first rollout
count at which LOPD's smoothed mean train reward reaches the reference's final smoothed value,
as a fraction of the reference's total rollouts (None = not reached within the budget).
"""

from __future__ import annotations

from benchmarks.experiments.plan import LABELS, TABLE_ORDER

BEHAVIOUR_KEYS = ("tool_calls_per_step", "interaction_steps", "first_response_tokens",
                  "reward_per_tool_call")
TIME_KEYS = ("generate", "compose", "teacher", "update", "total")


def stats(values) -> dict | None:
    """Mean, range and count of the non-None values (None if there are none)."""
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None
    return {"mean": sum(kept) / len(kept), "min": min(kept), "max": max(kept), "n": len(kept),
            "values": kept}


def _mean(values) -> float | None:
    s = stats(values)
    return s["mean"] if s else None


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing running mean: point i averages values[max(0, i - window + 1) .. i]."""
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1): i + 1]
        out.append(sum(part) / len(part))
    return out


def train_rows(result: dict) -> list[dict]:
    return [r for r in result.get("metrics", []) if "reward" in r]


# -- 1. efficiency ---------------------------------------------------------------------------------
def curve(results: list[dict], window: int) -> dict:
    """Mean train reward vs rollouts over seeds (truncated to the shortest run)."""
    per_seed = {str(r["seed"]): [row["reward"] for row in train_rows(r)] for r in results}
    n = min(len(v) for v in per_seed.values())
    xs = [row["rollouts"] for row in train_rows(results[0])][:n]
    columns = [[v[i] for v in per_seed.values()] for i in range(n)]
    mean = [sum(c) / len(c) for c in columns]
    return {"rollouts": xs, "per_seed": {s: v[:n] for s, v in per_seed.items()},
            "mean": mean, "min": [min(c) for c in columns], "max": [max(c) for c in columns],
            "smoothed": smooth(mean, window),
            "smoothed_per_seed": {s: smooth(v[:n], window) for s, v in per_seed.items()}}


def first_reach(xs: list[int], ys: list[float], threshold: float) -> int | None:
    for x, y in zip(xs, ys):
        if y >= threshold - 1e-12:
            return x
    return None


def share_of_budget(lopd: dict, ref: dict) -> dict:
    """Where LOPD's smoothed curve first reaches the reference's final smoothed reward."""
    threshold, budget = ref["smoothed"][-1], ref["rollouts"][-1]
    at = first_reach(lopd["rollouts"], lopd["smoothed"], threshold)
    per_seed = {}
    for seed, ys in lopd["smoothed_per_seed"].items():
        if seed in ref["smoothed_per_seed"]:
            hit = first_reach(lopd["rollouts"], ys, ref["smoothed_per_seed"][seed][-1])
            per_seed[seed] = hit / budget if hit is not None and budget else None
    return {"threshold": threshold, "budget": budget, "reached_at": at,
            "share": at / budget if at is not None and budget else None, "per_seed": per_seed,
            "lopd_final": lopd["smoothed"][-1], "ref_first": ref["mean"][0],
            "at_first_step": at is not None and at == lopd["rollouts"][0]}


def efficiency(by_method: dict[str, list[dict]], window: int = 2) -> dict:
    curves = {m: curve(rs, window) for m, rs in by_method.items()
              if rs and all(train_rows(r) for r in rs)}
    share = {ref: share_of_budget(curves["lopd"], curves[ref])
             for ref in ("grpo", "skill-sd") if "lopd" in curves and ref in curves}
    # every method's first step samples the same starting policy with the same seeds
    firsts = {m: [round(v[0], 9) for _, v in sorted(c["per_seed"].items())]
              for m, c in curves.items()}
    same_start = len({tuple(v) for v in firsts.values()}) <= 1
    return {"window": window, "curves": curves, "share": share, "same_first_step": same_start}


# -- 2. method table -------------------------------------------------------------------------------
def _suite_stats(results: list[dict], suite: str) -> dict | None:
    summaries = [r["eval"][suite] for r in results if suite in r.get("eval", {})]
    if not summaries:
        return None
    categories = sorted({c for s in summaries for c in s.get("by_category", {})})
    return {"n": summaries[0]["n"], "success": stats([s["success"] for s in summaries]),
            "reward": stats([s["reward"] for s in summaries]),
            "by_category": {c: stats([s.get("by_category", {}).get(c) for s in summaries])
                            for c in categories}}


def methods_table(by_name: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for name in TABLE_ORDER:
        results = by_name.get(name) or []
        if not results:
            continue
        suites = sorted({s for r in results for s in r.get("eval", {})})
        last = [train_rows(r)[-1] for r in results if train_rows(r)]
        rows.append({"name": name, "label": LABELS[name],
                     "seeds": [r["seed"] for r in results],
                     "rollouts": last[0]["rollouts"] if last else 0,
                     "train_reward_final": stats([row["reward"] for row in last]),
                     "suites": {s: _suite_stats(results, s) for s in suites}})
    return rows


# -- 3. ablations ----------------------------------------------------------------------------------
def ablation_row(name: str, label: str, result: dict) -> dict:
    method = result["config"]["method"]
    rows = train_rows(result)
    cold = result.get("coldstart") or {}
    tool = result.get("eval", {}).get("toolworld-test")
    return {
        "name": name, "label": label, "margin": method["margin"], "K": method["latent_tokens"],
        "J": method["num_experiences"], "context": method.get("context", "latent"),
        "composer": "frozen" if method["freeze_composer"] else "trained",
        "rollouts": rows[-1]["rollouts"] if rows else 0,
        "delta_mean": _mean(r["delta"] for r in rows),
        "beta_final": rows[-1]["beta"] if rows else None,
        "distill_mean": _mean(r["distill"] for r in rows),
        "reward_mean": _mean(r["reward"] for r in rows),
        "anchor_last": rows[-1]["anchor"] if rows else None,
        "nll_no_context": cold.get("heldout_nll_no_context"),
        "nll_phi0": cold.get("heldout_nll_context"),
        "nll_after": (result.get("probe") or {}).get("nll_context_after"),
        "probe_examples": (result.get("probe") or {}).get("examples"),
        "success": tool["success"] if tool else None,
        "wall_s": result["timing"]["wall_s"],
    }


def ablations(by_name: dict[str, dict], variants: list[tuple[str, str, tuple]]) -> list[dict]:
    return [ablation_row(name, label, by_name[name]) for name, label, _ in variants
            if by_name.get(name)]


# -- 4. behaviour ----------------------------------------------------------------------------------
def _behaviour_stats(results: list[dict], suite: str = "toolworld-test") -> dict:
    summaries = [r["eval"][suite] for r in results if suite in r.get("eval", {})]
    out = {k: stats([s["behaviour"][k] for s in summaries]) for k in BEHAVIOUR_KEYS}
    out["success"] = stats([s["success"] for s in summaries])
    return out


def behaviour(by_name: dict[str, list[dict]]) -> dict:
    """Held-out behaviour of vanilla and of each trained method, plus LOPD's train rollouts
    at its first vs last step."""
    rows = [{"name": n, "label": LABELS[n] if n == "vanilla" else f"after {LABELS[n]}",
             "seeds": [r["seed"] for r in by_name[n]], **_behaviour_stats(by_name[n])}
            for n in TABLE_ORDER if by_name.get(n)]
    train = {}
    for when, index in (("first step", 0), ("last step", -1)):
        steps = [train_rows(r)[index] for r in by_name.get("lopd", []) if train_rows(r)]
        train[when] = {k: stats([s.get(k) for s in steps]) for k in BEHAVIOUR_KEYS}
    return {"rows": rows, "lopd_train": train}


# -- 5. cost ---------------------------------------------------------------------------------------
def cost(by_name: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for name in TABLE_ORDER:
        results = by_name.get(name) or []
        steps = [row for r in results for row in train_rows(r)]
        if not steps:
            continue
        caches = {r["cache"]["key"]: r["cache"]["seconds"] for r in results if r.get("cache")}
        rows.append({
            "name": name, "label": LABELS[name], "steps": len(steps),
            "rollouts_per_step": steps[0]["rollouts"] if steps else None,
            "time": {k: stats([s.get(f"time/{k}", 0.0) for s in steps]) for k in TIME_KEYS},
            "peak_rss_mb": stats([r["peak_rss_mb"] for r in results]),
            "peak_rss_method": results[0].get("peak_rss_method"),
            "setup_s": stats(list(caches.values())),
        })
    grpo = next((r for r in rows if r["name"] == "grpo"), None)
    for row in rows:
        row["ratio_vs_grpo"] = (row["time"]["total"]["mean"] / grpo["time"]["total"]["mean"]
                                if grpo and grpo["time"]["total"]["mean"] else None)
    return rows
