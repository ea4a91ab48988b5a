"""ACEBench numbers from ``lopd eval`` runs: end-state accuracy and process score, each with its
standard error, overall and per split, from the per-episode log each run wrote
(``LOPD_ACEBENCH_LOG``, see ``lopd.envs.acebench.env``).

    python -m benchmarks.acebench_report vanilla=runs/acebench/vanilla.episodes.jsonl \\
        warm-start=runs/acebench/warm.episodes.jsonl

prints one markdown table (model, split, n, end-state accuracy +- SE, process score +- SE).
Each log must hold exactly one episode per task (a rerun appends: start from an empty file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lopd.evaluate import standard_error


def read_log(path: str | Path) -> list[dict]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    ids = [row["id"] for row in rows]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: a task appears twice; one episode per task is expected")
    return rows


def summary(rows: list[dict]) -> dict:
    ends = [float(r["end_state"]) for r in rows]
    process = [float(r["process"]) for r in rows]
    n = len(rows)
    return {"n": n, "end_state": sum(ends) / n, "end_state_se": standard_error(ends),
            "process": sum(process) / n, "process_se": standard_error(process)}


def table(runs: dict[str, list[dict]]) -> str:
    lines = ["| model | split | n | end-state accuracy | process score |", "|---|---|---|---|---|"]
    for label, rows in runs.items():
        splits = {"all": rows,
                  "multi-step": [r for r in rows if "multi_step" in r["id"]],
                  "multi-turn": [r for r in rows if "multi_turn" in r["id"]]}
        for split, chosen in splits.items():
            if not chosen:
                continue
            s = summary(chosen)
            lines.append(f"| {label} | {split} | {s['n']} | {s['end_state']:.3f} +- "
                         f"{s['end_state_se']:.3f} | {s['process']:.3f} +- {s['process_se']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="label=path/to/episodes.jsonl")
    args = parser.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, _, path = item.partition("=")
        runs[label] = read_log(path)
    print(table(runs), end="")


if __name__ == "__main__":
    main()
