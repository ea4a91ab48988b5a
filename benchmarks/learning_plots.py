"""Plots of the learning sweep: every run (`learning.png`) and the efficiency figure per
variant (`learning_efficiency.png`: train reward and held-out success against rollouts
consumed, the mean over seeds with the seeds' spread), as in the paper's efficiency figure."""

from __future__ import annotations

from pathlib import Path

from benchmarks.learning_report import (
    SMOOTH,
    _se,
    by_variant,
    fingerprint_of,
    heldout_points,
    pooled,
    pooled_points,
    smoothed,
    train_curve,
    warm_starts,
)
from lopd.evaluate import standard_error


def _axes(columns: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, columns, figsize=(5.5 * columns, 4))
    return plt, fig, axes


def _finish(plt, fig, axes, png: Path) -> None:
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_runs(summaries: list[dict], png: Path) -> None:
    """Train reward per step (moving mean of 5) and the held-out points, per run."""
    plt, fig, (train, held) = _axes(2)
    warms = warm_starts(summaries)
    for s in summaries:
        if not s["steps"]:
            continue
        x = [r["rollouts"] for r in s["steps"]]
        train.plot(x, smoothed([r["reward"] for r in s["steps"]]), label=f"{s['name']} s{s['seed']}")
        points = heldout_points(s, warms.get(fingerprint_of(s)))
        held.errorbar([p["rollouts"] for p in points], [p["success"] for p in points],
                      yerr=[_se(p) for p in points], marker="o",
                      capsize=3, label=f"{s['name']} s{s['seed']}")
    for fingerprint, warm in warms.items():
        held.axhline(warm["heldout"]["success"], color="gray", ls="--",
                     label=f"warm start [w {fingerprint}]")
    train.set(xlabel="rollouts", ylabel=f"train reward (moving mean of {SMOOTH} steps)")
    held.set(xlabel="rollouts", ylabel="held-out success (+- SE)")
    _finish(plt, fig, (train, held), png)


def plot_efficiency(summaries: list[dict], png: Path, names: set[str]) -> None:
    """Per variant in ``names``: train reward (mean over seeds, band = min..max over seeds) and
    held-out success (mean over seeds; error bar: SE of the seed-pooled per-task success at the
    final point, the seeds' range elsewhere)."""
    plt, fig, (train, held) = _axes(2)
    warms = warm_starts(summaries)
    for (name, fingerprint), runs in by_variant(summaries).items():
        if name not in names or not all(r["steps"] for r in runs):
            continue
        label = f"{name} ({len(runs)} seed{'s' if len(runs) > 1 else ''})"
        curve = train_curve(runs)
        x = [c[0] for c in curve]
        line, = train.plot(x, [c[1] for c in curve], label=label)
        train.fill_between(x, [c[2] for c in curve], [c[3] for c in curve],
                           color=line.get_color(), alpha=0.2)
        warm = warms.get(fingerprint)
        points = pooled_points(runs, warm)
        spread = []
        for rollouts, mean, *_ in points[:-1]:
            values = [p["success"] for r in runs for p in heldout_points(r, warm)
                      if p["rollouts"] == rollouts]
            spread.append((mean - min(values), max(values) - mean))
        final = standard_error(list(pooled(runs).values()))
        spread.append((final, final))
        held.errorbar([p[0] for p in points], [p[1] for p in points],
                      yerr=list(zip(*spread)), marker="o", capsize=3, color=line.get_color(),
                      label=label)
    train.set(xlabel="rollouts consumed", ylabel=f"train reward (moving mean of {SMOOTH})")
    held.set(xlabel="rollouts consumed", ylabel="held-out success, 200 tasks")
    _finish(plt, fig, (train, held), png)
