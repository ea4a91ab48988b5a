"""The paper-experiment harness (`benchmarks/experiments`) at quick scale, end to end, plus the
`method.context=text` ablation hook it relies on and the share-of-budget arithmetic."""

import json

import pytest
import torch

from benchmarks.experiments import analysis
from benchmarks.experiments.cli import main
from benchmarks.experiments.plan import LABELS
from benchmarks.experiments.report import HUMAN_END, HUMAN_START
from lopd.config import ConfigError, load_config

EXPERIMENTS = ("efficiency", "methods", "ablations", "behaviour", "cost")
ABLATIONS = ("LOPD (m=0.05, K=4, J=2)", "m = 0 (no margin)", "m = 0.01", "m = 0.1", "K = 2",
             "J = 1", "frozen composer (phi = phi_0)", "text context (same retrieved experiences)")


def test_share_of_budget_reads_the_smoothed_curves():
    grpo = analysis.curve([{"seed": 0, "metrics": [
        {"rollouts": 8 * (i + 1), "reward": r} for i, r in enumerate([0.1, 0.3, 0.5, 0.5])]}], 2)
    lopd = analysis.curve([{"seed": 0, "metrics": [
        {"rollouts": 8 * (i + 1), "reward": r} for i, r in enumerate([0.2, 0.8, 0.4, 0.9])]}], 2)
    share = analysis.share_of_budget(lopd, grpo)
    assert share["threshold"] == pytest.approx(0.5)  # mean of GRPO's last 2 steps
    assert share["reached_at"] == 16  # LOPD smoothed: 0.2, 0.5, 0.6, 0.65
    assert share["share"] == pytest.approx(0.5)
    assert share["per_seed"] == {"0": pytest.approx(0.5)}
    never = analysis.share_of_budget(grpo, lopd)  # GRPO never reaches LOPD's final 0.65
    assert never["share"] is None and never["reached_at"] is None


def _text_config(tmp_path, **extra):
    overrides = [
        "model.name=tiny-random", "model.dtype=fp32", "method.name=lopd", "method.context=text",
        "optim.steps=1", "optim.tasks_per_step=2", "optim.group_size=2", "optim.micro_batch=2",
        "optim.composer_lr=0.01", "rollout.max_steps=2", "rollout.max_new_tokens=8",
        "data.max_train_tasks=40", "data.eval_tasks=1", "method.latent_tokens=4",
        "method.num_experiences=2", "method.seed_experiences=12", "method.cold_start_steps=1",
        "method.experience_chars=120", "run.threads=1", "run.tensorboard=false",
        f"run.out_dir={tmp_path / 'text'}", *[f"{k}={v}" for k, v in extra.items()]]
    return load_config(None, overrides)


def test_text_context_shows_the_retrieved_experiences_as_text(tmp_path):
    from lopd.trainer import Trainer

    with pytest.raises(ConfigError, match="method.context"):
        _text_config(tmp_path, **{"method.context": "pictures"})
    trainer = Trainer(_text_config(tmp_path))
    coldstart = json.loads((tmp_path / "text" / "coldstart.json").read_text())
    assert coldstart["skipped"] == "method.context=text"  # the teacher never reads phi_0
    trajs = trainer.rt.rollout(trainer.sample_tasks(0), 0)
    context = trainer.rt.context(trajs, 0)
    assert context.task_latent is None and bool(context.active.all())
    shown = trainer.rt.tokenizer.decode(context.text_ids[0])
    assert "Experience from related tasks" in shown
    assert context.texts[0] and context.texts[0][0][:40] in shown  # the retrieved trace itself
    composer = [p.detach().clone() for p in trainer.rt.composer.trainable_parameters()]
    history = trainer.fit()
    assert history[0]["signal_rows"] == len(trajs)
    assert all(torch.equal(a, b) for a, b in zip(composer, trainer.rt.composer.trainable_parameters()))


def test_quick_sweep_writes_every_table_and_resumes(tmp_path, capsys):
    out, runs = tmp_path / "out", tmp_path / "runs"
    args = ["--scale", "quick", "--out", str(out), "--runs", str(runs)]
    assert main(["all", *args]) == 0
    for name in EXPERIMENTS:
        record = json.loads((out / f"{name}.json").read_text())
        assert record["missing"] == [] and record["command"].endswith(" ".join(args))
        assert all((out / png).stat().st_size > 1000 for png in record["plots"])
    efficiency = json.loads((out / "efficiency.json").read_text())["data"]
    assert set(efficiency["curves"]) == {"lopd", "grpo", "skill-sd"}
    assert all(len(c["per_seed"]) == 2 for c in efficiency["curves"].values())
    assert set(efficiency["share"]) == {"grpo", "skill-sd"}
    cost = json.loads((out / "cost.json").read_text())["data"]["rows"]
    assert all(row["peak_rss_mb"]["mean"] > 0 for row in cost)
    report = (out / "RESULTS.md").read_text()
    for label in LABELS.values():
        assert f"| {label} |" in report
    for label in ABLATIONS:
        assert f"| {label} |" in report
    assert "## Conclusions (computed)" in report and "Share of GRPO's budget" in report

    # a second invocation finds every run finished; the human section survives regeneration
    (out / "RESULTS.md").write_text(report.replace(
        report.split(HUMAN_START)[1].split(HUMAN_END)[0], "\nkept by hand\n"))
    capsys.readouterr()
    assert main(["all", *args]) == 0
    assert "18 runs, 18 already finished (0 of them" in capsys.readouterr().out
    assert "kept by hand" in (out / "RESULTS.md").read_text()

    # a suite asked for later is evaluated on the finished runs, with no training
    before = (runs / "toolworld" / "lopd-s0" / "metrics.jsonl").read_text()
    assert main(["methods", *args, "--bfcl", "1", "--only", "vanilla,lopd"]) == 0
    printed = capsys.readouterr().out
    assert "[run " not in printed and "[eval] toolworld/lopd-s0: adding bfcl-multi-turn" in printed
    assert (runs / "toolworld" / "lopd-s0" / "metrics.jsonl").read_text() == before
    rows = json.loads((out / "methods.json").read_text())["data"]["toolworld"]
    topped = {r["name"]: r for r in rows if "bfcl-multi-turn" in r["suites"]}
    assert {"vanilla", "lopd"} <= set(topped)
    assert topped["lopd"]["suites"]["bfcl-multi-turn"]["n"] >= 1


def test_code_preset_evaluates_humaneval_in_a_subprocess(tmp_path):
    out = tmp_path / "out"
    assert main(["methods", "--scale", "quick", "--presets", "code", "--only", "vanilla",
                 "--isolate", "--out", str(out), "--runs", str(tmp_path / "runs")]) == 0
    record = json.loads((out / "methods.json").read_text())
    assert [r["name"] for r in record["data"]["code"]] == ["vanilla"]
    assert record["data"]["code"][0]["suites"]["humaneval"]["n"] == 2
    assert len(record["missing"]) == 9  # --only: the trained rows are not run here
    assert "humaneval pass@1" in (out / "RESULTS.md").read_text()


def test_no_new_runs_trains_nothing(tmp_path, capsys):
    out, runs = tmp_path / "out", tmp_path / "runs"
    assert main(["methods", "--scale", "quick", "--presets", "code", "--no-new-runs",
                 "--out", str(out), "--runs", str(runs)]) == 0
    assert "[run " not in capsys.readouterr().out
    record = json.loads((out / "methods.json").read_text())
    assert len(record["missing"]) == 10 and not list(runs.glob("code/*/result.json"))


def _exited(pid: int) -> bool:
    """True once ``pid`` is gone or a zombie (an orphan is reaped by whoever adopted it)."""
    from pathlib import Path

    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" in status.read_text()
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/status").exists(),
                    reason="reads process states from /proc")
def test_an_isolated_run_stops_when_its_sweep_is_killed():
    """A run started by ``--isolate`` must not keep training once its sweep is gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from benchmarks.experiments.scales import REPO

    run = ("import time; from benchmarks.experiments.runner import exit_with_parent; "
           "exit_with_parent(0.1); time.sleep(60)")
    sweep = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {run!r}]);"
             " print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", sweep], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    child = int(parent.stdout.readline())
    time.sleep(3)  # the child has imported the runner and started watching
    assert not _exited(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 20
    while not _exited(child) and time.time() < deadline:
        time.sleep(0.2)
    assert _exited(child)


def test_evaluation_slots_let_that_many_in_and_make_the_next_wait(tmp_path, monkeypatch):
    import threading

    from benchmarks.experiments import runner

    monkeypatch.setattr(runner, "EVAL_LOCK", tmp_path / "evaluation.lock")
    inside, release, third_in = [], threading.Event(), threading.Event()

    def hold():
        with runner.evaluation_slot(2):
            inside.append(1)
            release.wait(10)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for thread in holders:
        thread.start()
    for _ in range(100):
        if len(inside) == 2:
            break
        threading.Event().wait(0.05)
    assert len(inside) == 2  # two slots: both in at once

    def third():
        with runner.evaluation_slot(2):
            third_in.set()

    waiter = threading.Thread(target=third)
    waiter.start()
    assert not third_in.wait(1.0)  # both slots held: the third waits
    release.set()
    assert third_in.wait(10)
    for thread in [*holders, waiter]:
        thread.join(10)


def test_evaluations_take_the_machine_one_at_a_time(tmp_path, monkeypatch):
    """A second evaluation (another process or thread) waits for the first to end."""
    import threading

    from benchmarks.experiments import runner

    monkeypatch.setattr(runner, "EVAL_LOCK", tmp_path / "evaluation.lock")
    order, first_in, release = [], threading.Event(), threading.Event()

    def first():
        with runner.evaluation_slot():
            order.append("first in")
            first_in.set()
            release.wait(10)
            order.append("first out")

    def second():
        first_in.wait(10)
        with runner.evaluation_slot():
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    first_in.wait(10)
    threads[1].join(0.5)  # the second is blocked on the lock, not finished
    assert threads[1].is_alive() and order == ["first in"]
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["first in", "first out", "second in"]


def test_the_cold_start_cache_key_ignores_what_the_cold_start_does_not_read():
    """Evaluation budgets, the margin, the context form and threads leave the bank seeding and
    the composer's cold start unchanged, so runs differing only there share one cold start;
    K changes it."""
    from benchmarks.experiments.runner import cache_key

    base = ["method.name=lopd", "run.seed=1"]
    key = cache_key(load_config(None, base))
    for extra in ("rollout.eval_max_new_tokens=64", "method.margin=0", "method.context=text",
                  "run.threads=1", "rollout.max_new_tokens=64", "method.freeze_composer=true"):
        assert cache_key(load_config(None, [*base, extra])) == key, extra
    assert cache_key(load_config(None, [*base, "method.latent_tokens=8"])) != key


def test_the_cold_start_cache_key_follows_the_warm_start_weights_not_their_path(tmp_path):
    """phi_0 is trained on the warm-started backbone: another warm start needs its own cold
    start, while a copy of the same adapter elsewhere shares it."""
    from benchmarks.experiments.runner import cache_key

    def adapter(name: str, weights: bytes) -> str:
        directory = tmp_path / name
        directory.mkdir()
        (directory / "adapter_model.safetensors").write_bytes(weights)
        return str(directory)

    def key(path: str) -> str:
        return cache_key(load_config(None, ["method.name=lopd", f"model.init_adapter={path}"]))

    first, copy, other = adapter("a", b"one"), adapter("b", b"one"), adapter("c", b"two")
    assert key(first) == key(copy)
    assert key(first) != key(other)
    assert key(first) != key("")
