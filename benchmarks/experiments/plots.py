"""One PNG per experiment (matplotlib, Agg backend), drawn from the experiment's JSON data."""

from __future__ import annotations

from pathlib import Path

from benchmarks.experiments.analysis import BEHAVIOUR_KEYS
from benchmarks.experiments.plan import LABELS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _err(stats_list: list[dict | None]) -> tuple[list[float], list[list[float]]]:
    means = [s["mean"] if s else 0.0 for s in stats_list]
    low = [s["mean"] - s["min"] if s else 0.0 for s in stats_list]
    high = [s["max"] - s["mean"] if s else 0.0 for s in stats_list]
    return means, [low, high]


def efficiency(data: dict, png: Path, title: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for method, c in data["curves"].items():
        line = ax.plot(c["rollouts"], c["mean"], marker="o",
                       label=f"{LABELS[method]} ({len(c['per_seed'])} seeds)")[0]
        ax.fill_between(c["rollouts"], c["min"], c["max"], alpha=0.15, color=line.get_color())
        ax.plot(c["rollouts"], c["smoothed"], linestyle=":", color=line.get_color())
    if "grpo" in data["share"]:
        ax.axhline(data["share"]["grpo"]["threshold"], color="grey", linestyle="--",
                   label="GRPO final (smoothed)")
    ax.set_xlabel("rollouts consumed")
    ax.set_ylabel("mean train reward")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, png)


def methods(rows: list[dict], suite: str, png: Path, title: str) -> Path:
    plt = _pyplot()
    shown = [r for r in rows if r["suites"].get(suite)]
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    means, err = _err([r["suites"][suite]["success"] for r in shown])
    ax.bar([r["label"] for r in shown], means, yerr=err, capsize=4, color="#4c72b0")
    ax.set_ylabel("held-out success" if suite != "humaneval" else "pass@1")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, png)


def ablations(rows: list[dict], png: Path, title: str) -> Path:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = [r["name"] for r in rows]
    left.bar(names, [r["delta_mean"] or 0.0 for r in rows], color="#55a868")
    left.set_title("mean privilege Delta over the run", fontsize=9)

    def gain(r: dict, key: str) -> float:
        if r[key] is None or r["nll_no_context"] is None:
            return 0.0
        return r[key] - r["nll_no_context"]

    xs = range(len(rows))
    right.bar([x - 0.2 for x in xs], [gain(r, "nll_phi0") for r in rows], width=0.4,
              color="#8c8c8c", label="phi_0 context")
    right.bar([x + 0.2 for x in xs], [gain(r, "nll_after") for r in rows], width=0.4,
              color="#c44e52", label="final context")
    right.set_xticks(list(xs), names)
    right.axhline(0.0, color="black", linewidth=0.8)
    right.set_title("teacher NLL minus no-context NLL (below 0 = informative)", fontsize=9)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return _save(fig, png)


def behaviour(data: dict, png: Path, title: str) -> Path:
    plt = _pyplot()
    rows = data["rows"]
    fig, axes = plt.subplots(1, len(BEHAVIOUR_KEYS), figsize=(13, 3.4))
    for ax, key in zip(axes, BEHAVIOUR_KEYS):
        means, err = _err([r[key] for r in rows])
        colours = ["#8c8c8c" if r["name"] == "vanilla" else
                   "#dd8452" if r["name"] == "lopd" else "#4c72b0" for r in rows]
        ax.bar([r["name"] for r in rows], means, yerr=err, capsize=3, color=colours)
        ax.set_title(key.replace("_", " "), fontsize=9)
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return _save(fig, png)


def cost(rows: list[dict], png: Path, title: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    bottom = [0.0] * len(rows)
    for part in ("generate", "compose", "teacher", "update"):
        values = [(r["time"][part] or {}).get("mean", 0.0) for r in rows]
        ax.bar([r["label"] for r in rows], values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    for x, (row, top) in enumerate(zip(rows, bottom)):
        peak = row["peak_rss_mb"]["mean"] if row["peak_rss_mb"] else 0.0
        ax.text(x, top, f"{peak / 1024:.1f} GB", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("seconds per step (peak RSS on top)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, png)


def _save(fig, png: Path) -> Path:
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return png
