"""Rollouts per hour of the real training loop: two settings, one run, interleaved.

For each method, two worker processes build a ``Trainer`` exactly as ``lopd train`` does (the
SmolLM2 preset ``configs/toolworld-smollm2.yaml`` plus overrides) and then take turns: one
training step of setting A, one of B, one of B, one of A, ... so that load from other processes
hits both alike. Setting A (the baseline) can run the code of another git revision
(``--baseline-ref``: its ``lopd/`` and ``configs/`` are extracted to a temporary directory and
put first on the worker's ``sys.path``), with its own overrides (``--baseline``); setting B runs
this working tree with ``--after`` overrides; ``--also NAME=OVERRIDES`` adds more settings of
this tree to the same rotation (e.g. ``rollout.backend=vllm`` beside ``rollout.backend=hf``).
After the steps each worker runs the held-out evaluation once (greedy, ``data.eval_tasks``
episodes). A worker builds its generation backend (a vLLM engine, say) before it reports
ready, so the first step's time does not include it.

Per setting it reports rollouts per hour (rollouts over the summed step times), new tokens per
second in generation, update tokens per second (every token of the step's trajectories over
teacher + update time), the trainer's per-phase timings, peak RSS during a step (Linux VmHWM,
reset before each step) and held-out episodes per hour.

    .venv/bin/python benchmarks/bench_throughput.py --methods grpo,lopd --steps 2 \\
        --baseline-ref HEAD --baseline "optim.tasks_per_step=4" --after ""

Writes RESULTS_DIR/NAME.{json,md} (default benchmarks/results/throughput.*).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
PRESET = "configs/toolworld-smollm2.yaml"
TAG = "@@bench "
PHASES = ("generate", "compose", "teacher", "update", "total")


# -- worker: one trainer, steps on request ------------------------------------------------------

def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _reply(payload: dict) -> None:
    sys.stdout.write(TAG + json.dumps(payload) + "\n")
    sys.stdout.flush()


def worker(tree: str, overrides: list[str]) -> None:
    """Build the trainer from ``tree``'s preset and serve ``step`` / ``eval`` / ``quit``."""
    from lopd.config import load_config
    from lopd.trainer import Trainer

    started = time.perf_counter()
    trainer = Trainer(load_config(Path(tree) / PRESET, overrides))
    captured: dict = {}
    rollout = trainer.rt.rollout

    def counting_rollout(tasks, step):
        trajs = rollout(tasks, step)
        captured["tokens"] = sum(len(t.input_ids) for t in trajs)
        captured["turns"] = sum(len(t.turn_spans) for t in trajs)
        return trajs

    trainer.rt.rollout = counting_rollout
    try:  # the held-out evaluation of a run: a function of lopd.evaluate, a method in old trees
        from lopd.evaluate import evaluate_runtime as evaluate
    except ImportError:
        evaluate = type(trainer.rt).evaluate
    trainer.rt.backend()  # a vLLM engine is built (and loaded) here, not in the first step
    _reply({"ready": round(time.perf_counter() - started, 1), "rss_mb": round(_status_mb("VmRSS"))})
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
        if command[0] == "step":
            metrics = trainer.train_step(int(command[1]))
            metrics.update(total_tokens=captured["tokens"], turns=captured["turns"])
        else:
            mark = time.perf_counter()
            summary = evaluate(trainer.rt)
            metrics = {"episodes": summary["n"], "success": summary["success"],
                       "seconds": time.perf_counter() - mark}
        metrics["peak_rss_mb"] = round(_status_mb("VmHWM"))
        _reply(metrics)


# -- parent: two workers per method ---------------------------------------------------------------

def extract_tree(ref: str, into: Path) -> Path:
    """``lopd/`` and ``configs/`` of git revision ``ref`` under ``into`` (git archive)."""
    data = subprocess.run(["git", "archive", "--format=tar", ref, "lopd", "configs"], cwd=ROOT,
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return into


class Worker:
    """A worker process; ``ask`` sends one command and returns its reply."""

    def __init__(self, label: str, tree: Path, overrides: list[str], log: Path):
        env = dict(os.environ, PYTHONPATH=str(tree), TOKENIZERS_PARALLELISM="false")
        command = [sys.executable, __file__, "--worker", str(tree), *overrides]
        self.label, self.log = label, log.open("w")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, text=True, bufsize=1,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log)

    def read(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
            self.log.write(line)
        code = self.process.wait()
        self.log.flush()
        tail = Path(self.log.name).read_text()[-3000:]
        raise RuntimeError(f"worker {self.label} exited ({code}):\n{tail}")

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            self.process.wait(timeout=120)
        self.log.close()


def common_overrides(args, method: str, out: Path) -> list[str]:
    items = [f"method.name={method}", f"model.name={args.model}", f"run.out_dir={out}",
             f"run.threads={args.threads}", "run.tensorboard=false",
             f"data.eval_tasks={args.eval_tasks}",
             f"method.seed_experiences={args.seed_experiences}",
             f"method.cold_start_steps={args.cold_start_steps}"]
    adapter = args.adapter if (ROOT / args.adapter).exists() or Path(args.adapter).exists() else ""
    return items + [f"model.init_adapter={adapter}"]


def run_method(args, method: str, trees: dict[str, Path], scratch: Path) -> dict:
    settings = {"before": shlex.split(args.baseline), "after": shlex.split(args.after)}
    for item in args.also:
        name, _, overrides = item.partition("=")
        settings[name] = shlex.split(overrides)
    workers = {}
    try:
        for label, extra in settings.items():
            out = scratch / f"{method}-{label}"
            workers[label] = Worker(label, trees.get(label, ROOT),
                                    common_overrides(args, method, out) + extra,
                                    scratch / f"{method}-{label}.log")
        setup = {label: w.read() for label, w in workers.items()}
        steps: dict[str, list[dict]] = {label: [] for label in workers}
        for step in range(args.first_step, args.first_step + args.steps):  # A B C, C B A, ...
            order = list(workers) if (step - args.first_step) % 2 == 0 else list(workers)[::-1]
            for label in order:
                steps[label].append(workers[label].ask(f"step {step}"))
                print(f"{method} {label} step {step}: {steps[label][-1]['time/total']:.1f} s",
                      flush=True)
        evals = {}
        if args.eval_tasks:
            for label, each in workers.items():
                evals[label] = each.ask("eval")
                print(f"{method} {label} eval: {evals[label]['seconds']:.1f} s", flush=True)
    finally:
        for w in workers.values():
            w.close()
    return {label: summarize(steps[label], setup[label], evals.get(label)) for label in workers}


def summarize(steps: list[dict], setup: dict, evaluation: dict | None) -> dict:
    total = sum(s["time/total"] for s in steps)
    phase = {p: sum(s.get(f"time/{p}", 0.0) for s in steps) / len(steps) for p in PHASES}
    update_time = sum(s.get("time/update", 0.0) + s.get("time/teacher", 0.0) for s in steps)
    summary = {
        "steps": len(steps), "rollouts_per_step": steps[0]["rollouts"],
        "rollouts_per_hour": 3600 * steps[0]["rollouts"] * len(steps) / total,
        "step_seconds": total / len(steps),
        "gen_tokens_per_s": sum(s["action_tokens"] for s in steps)
        / max(sum(s["time/generate"] for s in steps), 1e-9),
        "update_tokens_per_s": sum(s["total_tokens"] for s in steps) / max(update_time, 1e-9),
        "phase_seconds": phase, "peak_rss_mb": max(s["peak_rss_mb"] for s in steps),
        "reward": sum(s["reward"] for s in steps) / len(steps),
        "action_tokens": sum(s["action_tokens"] for s in steps) / len(steps),
        "turns": sum(s["turns"] for s in steps) / len(steps),
        "setup_seconds": setup["ready"], "raw_steps": steps,
    }
    if evaluation:
        summary["eval_episodes_per_hour"] = 3600 * evaluation["episodes"] / evaluation["seconds"]
        summary["eval"] = evaluation
    return summary


def cpu_line() -> str:
    """``lopd info``'s capability line and the CPU model with its bf16-relevant flags."""
    info = subprocess.run([sys.executable, "-m", "lopd.cli", "info"], check=False, cwd=ROOT,
                          capture_output=True, text=True).stdout.splitlines()
    wanted = [line for line in info if line.startswith(("cpu", "cuda", "bf16", "torch threads"))]
    if "torch" in sys.modules:  # the threads this process runs with, not the subprocess's default
        threads = f"torch threads: {sys.modules['torch'].get_num_threads()} (cores: {os.cpu_count()})"
        wanted = [threads if line.startswith("torch threads") else line for line in wanted]
    model, flags = "", set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{model} ({os.cpu_count()} cores; flags: {' '.join(simd)}); " + "; ".join(wanted)


def markdown(report: dict) -> str:
    lines = ["# Training throughput: rollouts per hour", "",
             f"Command: `{report['command']}`", "", f"CPU: {report['cpu']}", "",
             f"Before: {report['before']}", "", f"After: {report['after']}", "",
             *[f"{name}: {text}\n" for name, text in report.items()
               if name not in ("command", "cpu", "before", "after", "methods")],
             ("| method | setting | rollouts/step | s/step | rollouts/h | gen tok/s | update tok/s"
              " | peak RSS MB | eval episodes/h | reward |"), "|" + "---|" * 10]
    for method, result in report["methods"].items():
        for label, s in result.items():
            lines.append(
                f"| {method} | {label} | {s['rollouts_per_step']} | {s['step_seconds']:.1f} | "
                f"{s['rollouts_per_hour']:.0f} | {s['gen_tokens_per_s']:.1f} | "
                f"{s['update_tokens_per_s']:.0f} | {s['peak_rss_mb']} | "
                f"{s.get('eval_episodes_per_hour', 0):.0f} | {s['reward']:.3f} |")
    lines += ["", "Ratios (each setting / before):", ""]
    for method, r in report["methods"].items():
        for label in [name for name in r if name != "before"]:
            lines.append(_ratio_line(method, label, r[label], r["before"]))
    lines += ["", ("Mean seconds per step by phase (teacher is inside the update loop; update"
                   " excludes it):"), "", "| method | setting | " + " | ".join(PHASES) + " | turns | action tokens |",
              "|" + "---|" * (len(PHASES) + 4)]
    for method, result in report["methods"].items():
        for label, s in result.items():
            cells = " | ".join(f"{s['phase_seconds'][p]:.1f}" for p in PHASES)
            lines.append(f"| {method} | {label} | {cells} | {s['turns']:.0f} | {s['action_tokens']:.0f} |")
    return "\n".join(lines) + "\n"


def _ratio_line(method: str, label: str, s: dict, before: dict) -> str:
    line = (f"- {method} {label}: rollouts/h {s['rollouts_per_hour'] / before['rollouts_per_hour']:.2f}x, "
            f"gen tok/s {s['gen_tokens_per_s'] / before['gen_tokens_per_s']:.2f}x, "
            f"update tok/s {s['update_tokens_per_s'] / before['update_tokens_per_s']:.2f}x")
    if "eval_episodes_per_hour" in s and "eval_episodes_per_hour" in before:
        line += f", eval episodes/h {s['eval_episodes_per_hour'] / before['eval_episodes_per_hour']:.2f}x"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="grpo,lopd,sdft,skill-sd")
    parser.add_argument("--steps", type=int, default=2, help="steps per method and setting")
    parser.add_argument("--first-step", type=int, default=0,
                        help="index of the first step (its tasks and seeds), e.g. to repeat one")
    parser.add_argument("--baseline-ref", default="", help="git revision for the baseline's code "
                        "(default: this working tree)")
    parser.add_argument("--baseline", default="", help="overrides of the baseline setting")
    parser.add_argument("--after", default="", help="overrides of the new setting")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=OVERRIDES",
                        help="another setting of this tree, e.g. vllm='rollout.backend=vllm'")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", default="runs/sft/adapter")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-tasks", type=int, default=8)
    parser.add_argument("--seed-experiences", type=int, default=30)
    parser.add_argument("--cold-start-steps", type=int, default=2)
    parser.add_argument("--name", default="throughput")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args()
    report = {"command": " ".join(shlex.quote(a) for a in ["benchmarks/bench_throughput.py", *sys.argv[1:]]),
              "cpu": cpu_line(),
              "before": f"code {args.baseline_ref or 'this tree'}, preset + `{args.baseline}`",
              "after": f"code this tree, preset + `{args.after}`", "methods": {},
              **{item.partition("=")[0]: f"code this tree, preset + `{item.partition('=')[2]}`"
                 for item in args.also}}
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        scratch = Path(tmp)
        before = extract_tree(args.baseline_ref, scratch / "before") if args.baseline_ref else ROOT
        for method in args.methods.split(","):
            report["methods"][method] = run_method(args, method, {"before": before, "after": ROOT},
                                                   scratch)
            write(report, Path(args.results_dir), args.name)
    print(markdown(report))


def write(report: dict, directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(report, indent=2))
    (directory / f"{name}.md").write_text(markdown(report))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
    else:
        main()
