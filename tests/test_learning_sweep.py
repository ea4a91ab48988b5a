"""The learning sweep (`benchmarks/learning.py`) end to end on the tiny model, and its paired
statistics on hand-worked values."""

import json

import pytest

from benchmarks import learning


def test_paired_gain_and_itsstandard_error():
    after = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0}
    before = {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0, "e": 1.0}  # e: not in both, ignored
    mean, se, n = learning.paired(after, before)
    # differences 1, 0, 0, 1: mean 0.5, sample variance 1/3, SE sqrt(1/3 / 4)
    assert (mean, n) == (0.5, 4)
    assert se == pytest.approx((1 / 12) ** 0.5)
    assert learning.pooled([{"heldout": {"per_task": {"a": 1.0, "b": 0.0}}},
                            {"heldout": {"per_task": {"a": 0.0, "b": 0.0}}}]) == {"a": 0.5, "b": 0.0}


def test_sweep_runs_resumes_and_reports(tmp_path, monkeypatch):
    monkeypatch.setattr(learning, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(learning, "OUT", tmp_path / "results" / "learning")
    tiny = ["model.name=tiny-random", "model.dtype=fp32", "optim.tasks_per_step=2",
            "optim.group_size=2", "optim.micro_batch=2", "rollout.max_steps=2",
            "rollout.max_new_tokens=8", "data.max_train_tasks=40"]
    argv = ["run", "--variants", "grpo-lr1e-3", "--seeds", "0", "--steps", "2", "--eval-tasks",
            "3", "--init-adapter", "", "--runs", str(tmp_path / "runs"), "--no-isolate",
            "--checkpoint-every", "1", *[a for o in tiny for a in ("--set", o)]]
    assert learning.main(argv) == 0
    runs = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "results" / "learning").glob("*.json")}
    assert set(runs) == {"warm-start-s0-wnone", "grpo-lr1e-3-s0-wnone"}  # no warm start: "none"
    trained = runs["grpo-lr1e-3-s0-wnone"]
    assert trained["rollouts"] == 8 and len(trained["steps"]) == 2
    assert trained["heldout"]["n"] == 3 and len(trained["heldout"]["per_task"]) == 3
    warm = runs["warm-start-s0-wnone"]
    assert warm["rollouts"] == 0 and warm["method"] == "grpo" and warm["warm_start"] == "none"
    report = (tmp_path / "results" / "learning.md").read_text()
    assert "GRPO, LoRA lr 1e-3" in report and "vanilla (the base model, no warm start)" in report
    assert (tmp_path / "results" / "learning.png").stat().st_size > 0
    checkpoints = sorted((tmp_path / "runs" / "grpo-lr1e-3-s0-wnone" / "checkpoints").iterdir())
    assert len(checkpoints) == 2  # every step kept, for held-out points along the curve
    finished = trained["finished"]
    # finished runs are skipped, not trained again; --at evaluates their kept checkpoints
    # while the run directory is here (the last checkpoint is the run's own held-out point)
    assert learning.main([*argv, "--at", "1", "--eval-batch", "4"]) == 0
    again = json.loads((tmp_path / "results" / "learning" / "grpo-lr1e-3-s0-wnone.json").read_text())
    assert again["finished"] == finished and [p["step"] for p in again["curve"]] == [1]
    assert learning.main(["curve", "--variants", "grpo-lr1e-3", "--eval-batch", "4"]) == 0
    curve = json.loads((tmp_path / "results" / "learning" / "grpo-lr1e-3-s0-wnone.json").read_text())["curve"]
    assert [(p["step"], p["rollouts"], p["n"]) for p in curve] == [(1, 4, 3)]
    assert "Held-out success along the budget" in (tmp_path / "results" / "learning.md").read_text()


def test_successstandard_error_by_hand():
    from lopd.evaluate import standard_error

    assert standard_error([1.0, 0.0, 1.0, 0.0]) == pytest.approx((1 / 3 / 4) ** 0.5)
    assert standard_error([1.0]) == 0.0


def test_runs_pair_only_with_the_warm_start_they_began_from(tmp_path):
    def run(name, warm, per_task):
        label = "warm" if name == learning.WARM else "GRPO"
        return {"name": name, "seed": 0, "label": label, "rollouts": 0 if name == learning.WARM
                else 32, "steps": [], "timing": {}, "heldout": {"n": 2, "success": 0.5,
                "per_task": per_task}, **({"warm_start": warm} if warm else {})}

    summaries = [run(learning.WARM, "aaa", {"t1": 0.0, "t2": 0.0}),
                 run(learning.WARM, None, {"t1": 1.0, "t2": 1.0}),  # written before fingerprints
                 run("grpo-lr1e-3", "aaa", {"t1": 1.0, "t2": 0.0}),
                 run("grpo-lr1e-3", None, {"t1": 1.0, "t2": 0.0}),
                 run("grpo-lr2e-3", "bbb", {"t1": 1.0, "t2": 1.0})]  # its warm start: not run
    rows = {line.split(" | ")[0]: line for line in learning.report_lines(summaries)[2:]}
    assert "+0.500" in rows["| GRPO [w aaa]"]  # against warm start aaa (0, 0)
    assert "-0.500" in rows["| GRPO [w unknown]"]  # against the older warm start (1, 1)
    assert rows["| GRPO [w bbb]"].split(" | ")[4] == "-"  # no warm start to pair with
    from pathlib import Path

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    first = learning.adapter_fingerprint(str(adapter))
    (adapter / "adapter_model.safetensors").write_bytes(b"other weights")
    assert len(first) == 12 and learning.adapter_fingerprint(str(adapter)) != first
    assert learning.adapter_fingerprint("") == "none"
    assert learning.adapter_fingerprint(str(Path(tmp_path / "nowhere"))) == "missing"


def test_the_warm_start_job_does_not_depend_on_checkpoint_settings(tmp_path):
    import argparse

    def args(every):
        return argparse.Namespace(runs=str(tmp_path), init_adapter="", checkpoint_every=every,
                                  set=[], eval_tasks=0, eval_batch=4)

    warm = [learning.job(learning.WARM, 0, 0, args(e), 2) for e in (5, 8)]
    assert warm[0].fingerprint == warm[1].fingerprint
    trained = [learning.job("grpo-lr1e-3", 0, 10, args(e), 2) for e in (5, 8)]
    assert trained[0].fingerprint != trained[1].fingerprint  # a trained run keeps other checkpoints


def test_the_warm_start_job_without_an_adapter_is_labelled_vanilla(tmp_path):
    import argparse

    def warm(adapter):
        args = argparse.Namespace(runs=str(tmp_path), init_adapter=adapter, checkpoint_every=4,
                                  set=[], eval_tasks=0, eval_batch=4)
        return learning.job(learning.WARM, 0, 0, args, 2)

    assert learning._label(warm("")) == "vanilla (the base model, no warm start)"
    assert learning._label(warm(str(learning.WARM_ADAPTER))) == "warm start (no training)"


def test_a_committed_summary_is_not_run_again(tmp_path, monkeypatch):
    import argparse

    monkeypatch.setattr(learning, "OUT", tmp_path)
    args = argparse.Namespace(runs=str(tmp_path / "runs"), init_adapter="", checkpoint_every=8,
                              set=[], eval_tasks=0, eval_batch=4)
    job = learning.job("grpo-lr1e-3", 0, 10, args, 2)
    assert not learning.committed(job)
    (tmp_path / "grpo-lr1e-3-s0-wnone.json").write_text(json.dumps(
        {"overrides": [o.replace("run.threads=2", "run.threads=1") for o in job.overrides]}))
    assert learning.committed(job)  # another thread count is the same run
    assert not learning.committed(learning.job("grpo-lr1e-3", 0, 12, args, 2))  # more steps


def test_tier_table_averages_each_tier_of_the_held_out_tasks():
    tiers = learning.test_tiers()
    assert len(tiers) == 200 and set(tiers.values()) == {1, 2, 3, 4, 5}
    one = sorted(t for t, tier in tiers.items() if tier == 1)[:2]
    two = sorted(t for t, tier in tiers.items() if tier == 2)[:1]
    run = {"label": "GRPO", "seed": 0, "warm_start": "aaa",
           "heldout": {"per_task": {one[0]: 1.0, one[1]: 0.0, two[0]: 1.0}}}
    lines = learning.tier_lines([run])
    assert "tier 1 (80)" in lines[2] and "tier 5 (12)" in lines[2]
    assert lines[4] == "| GRPO [w aaa] | 0 | 0.500 | 1.000 | - | - | - |"


def test_mixed_group_share_by_hand():
    from benchmarks.group_signal import mixed_share

    assert mixed_share([0.5], 4) == pytest.approx(1 - 2 / 16)
    assert mixed_share([0.0, 1.0], 8) == 0.0  # always or never solved: no signal
    assert mixed_share([0.5, 0.0], 2) == pytest.approx(0.25)


def test_curve_evaluates_only_the_asked_checkpoints_and_resumes(tmp_path, monkeypatch):
    import lopd.checkpoint
    import lopd.evaluate

    run_dir = tmp_path / "run"
    checkpoints = [run_dir / "checkpoints" / f"step-{n}" for n in (4, 8, 12, 16)]
    monkeypatch.setattr(lopd.checkpoint, "list_checkpoints", lambda _: checkpoints)
    evaluated = []

    def fake_eval(spec):
        evaluated.append(spec.adapter)
        return {"toolworld-test": {"n": 2, "success": 0.5, "per_task": {"a": 1.0, "b": 0.0}}}

    monkeypatch.setattr(lopd.evaluate, "run_eval", fake_eval)
    monkeypatch.setattr(learning, "REPO", tmp_path)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({
        "run_dir": "run", "heldout": {"n": 2},
        "overrides": ["optim.tasks_per_step=4", "optim.group_size=8", "rollout.max_new_tokens=96",
                      "rollout.max_steps=6"]}))
    assert learning.curve_points(path, 1, 8, steps={8}) == 1
    assert evaluated == [str(checkpoints[1] / "student")]
    assert learning.curve_points(path, 1, 8) == 2  # steps 4 and 12; 8 is kept, 16 is the run's own
    assert len(evaluated) == 3
    curve = json.loads(path.read_text())["curve"]
    assert [(p["step"], p["rollouts"]) for p in curve] == [(4, 128), (8, 256), (12, 384)]


def test_committed_runs_keep_their_variant_definitions():
    """The generated variants at the learning setting are the ones the committed runs used, so
    a committed summary is recognised and not trained again."""
    from benchmarks.experiments.plan import identity_overrides

    checked = 0
    for path in learning.OUT.glob("*.json"):
        data = json.loads(path.read_text())
        if data["name"] == learning.WARM:
            continue
        label, overrides = learning.VARIANTS[data["name"]]
        assert label == data["label"]
        assert identity_overrides(data["overrides"])[-len(overrides):] == list(overrides)
        checked += 1
    assert checked >= 3
    assert learning.VARIANTS[f"lopd-{learning.SETTING}-m0"][1][-1] == "method.margin=0"
    assert "optim.micro_batch=8" in learning.setting_overrides("grpo")


def _summary(name, seed, rollouts, per_task, curve=(), rewards=(), suites=None):
    return {"name": name, "seed": seed, "label": name, "warm_start": "w", "rollouts": rollouts,
            "steps": [{"step": i, "rollouts": 32 * (i + 1), "reward": r} for i, r in enumerate(rewards)],
            "heldout": {"n": len(per_task), "success": sum(per_task.values()) / len(per_task),
                        "per_task": per_task},
            "curve": [{"rollouts": r, "success": sum(p.values()) / len(p), "per_task": p}
                      for r, p in curve], "suites": suites or {}, "timing": {}, "cpu": "cpu A"}


def test_efficiency_share_of_the_reference_budget_by_hand():
    from benchmarks import learning_report as lr

    warm = _summary(lr.WARM, 0, 0, {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0})
    # GRPO: final held-out 0.5 (mean of seeds 0.5 and 0.5), final smoothed train reward 0.8
    grpo = [_summary("grpo", s, 96, {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0},
                     rewards=[0.8, 0.8, 0.8]) for s in (0, 1)]
    # LOPD reaches 0.5 at its 32-rollout checkpoint on seed 0 and 0.5 on seed 1 too: share 1/3
    lopd = [_summary("lopd", 0, 96, {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0},
                     curve=[(32, {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0})], rewards=[0.2, 0.2, 0.2]),
            _summary("lopd", 1, 96, {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0},
                     curve=[(32, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0})], rewards=[0.2, 0.2, 0.2])]
    points = lr.pooled_points(lopd, warm)
    assert [p[:3] for p in points] == [(0, 0.0, 2), (32, 0.625, 2), (96, 0.25, 2)]
    # at 32 the per-task means over the seeds are 1, 1, 0.5, 0: sample variance 0.6875 / 3
    assert points[1][3] == pytest.approx((0.6875 / 3 / 4) ** 0.5)
    assert points[0][3] == 0.0 and points[2][3] == pytest.approx(0.25)
    lines = lr.efficiency_lines([warm, *grpo, *lopd], "grpo", ("lopd", "skill-sd"))
    row = next(line for line in lines if line.startswith("| lopd"))
    assert "| 33% (32 rollouts) | not reached |" in row
    assert "final held-out success 0.500" in lines[0] and "0.800" in lines[0]
    assert lr.first_reaching([(0, 0.1), (10, 0.49999999999), (20, 0.7)], 0.5) == 10
    assert lr.smoothed([0.0, 1.0, 0.5], window=2) == [0.0, 0.5, 0.75]


def test_method_table_pools_seeds_per_suite_and_pairs_with_the_warm_start():
    from benchmarks import learning_report as lr

    humaneval = {"n": 2, "success": 0.5, "per_task": {"h1": 1.0, "h2": 0.0}}
    warm = _summary(lr.WARM, 0, 0, {"a": 0.0, "b": 1.0}, suites={"humaneval": humaneval})
    runs = [_summary("grpo", s, 32, {"a": 1.0, "b": 1.0}, suites={"humaneval": {
        "n": 2, "success": 0.5, "per_task": {"h1": float(s), "h2": 1.0}}}) for s in (0, 1)]
    lines = lr.method_table_lines([warm, *runs], ("toolworld-test", "humaneval"))
    assert lines[2] == "| variant | seeds | rollouts | toolworld-test | humaneval |"
    assert lines[4].startswith("| warm-start [w w] | 0 | 0 | 0.500 (2) +- 0.500 | 0.500 (2)")
    # humaneval pooled: h1 0.5, h2 1.0 -> 0.75 +- 0.25; paired vs (1, 0): (-0.5, +1) -> +0.25 +- 0.75
    assert lines[5] == ("| grpo [w w] | 0,1 | 32 | 1.000 (2) +- 0.000; +0.500 +- 0.500 | "
                        "0.750 (2) +- 0.250; +0.250 +- 0.750 |")
    assert lr.method_table_lines([warm], ("toolworld-test",)) == []  # nothing beyond held-out
    # a table method with held-out ToolWorld only still gets its row, "-" for the rest
    lopd = _summary("lopd", 0, 32, {"a": 0.0, "b": 1.0})
    lines = lr.method_table_lines([warm, *runs, lopd], ("toolworld-test", "humaneval"), ("lopd",))
    assert lines[6] == "| lopd [w w] | 0 | 32 | 0.500 (2) +- 0.500; +0.000 +- 0.000 | - |"


def test_suite_points_evaluate_the_final_student_on_missing_suites(tmp_path, monkeypatch):
    import lopd.checkpoint
    import lopd.evaluate

    run_dir = tmp_path / "run"
    final = run_dir / "checkpoints" / "step-000002"  # the trainer's checkpoint names
    monkeypatch.setattr(lopd.checkpoint, "list_checkpoints",
                        lambda d: [run_dir / "checkpoints" / "step-000001", final] if d == run_dir else [])
    specs = []

    def fake_eval(spec):
        specs.append(spec)
        return {spec.suites[0]: {"n": 1, "success": 1.0, "reward": 1.0, "per_task": {"t": 1.0}}}

    monkeypatch.setattr(lopd.evaluate, "run_eval", fake_eval)
    monkeypatch.setattr(learning, "REPO", tmp_path)
    overrides = ["rollout.max_new_tokens=96", "rollout.max_steps=6", "model.init_adapter=warm"]
    trained = tmp_path / "grpo.json"
    trained.write_text(json.dumps({"name": "grpo", "run_dir": "run", "steps": [{}, {}],
                                   "overrides": overrides}))
    suites = ["toolworld-test", "toolworld-transfer", "humaneval"]
    assert learning.suite_points(trained, suites, 1, 8) == 2  # its own held-out is not redone
    assert [(s.suites, s.max_steps, s.max_new_tokens, s.adapter) for s in specs] == [
        (["toolworld-transfer"], 6, 96, str(final / "student")),
        (["humaneval"], 1, 256, str(final / "student"))]
    assert specs[0].init_adapter == "warm"
    assert set(json.loads(trained.read_text())["suites"]) == {"toolworld-transfer", "humaneval"}
    assert learning.suite_points(trained, suites, 1, 8) == 0  # resumable: nothing left
    warm = tmp_path / "warm.json"
    warm.write_text(json.dumps({"name": learning.WARM, "steps": [], "overrides": overrides}))
    assert learning.suite_points(warm, ["toolworld-test"], 1, 8) == 1  # the control
    assert specs[-1].adapter == "" and specs[-1].init_adapter == "warm"
    gone = tmp_path / "gone.json"
    gone.write_text(json.dumps({"name": "grpo", "run_dir": "elsewhere", "steps": [{}],
                                "overrides": overrides}))
    with pytest.raises(SystemExit, match="final checkpoint"):
        learning.suite_points(gone, ["humaneval"], 1, 8)


def test_train_seconds_count_every_process_that_trained_the_run():
    from benchmarks.learning_report import train_seconds

    resumed = {"steps": [{"time/total": 100.0}, {"time/total": 50.5}], "timing": {"train_s": 0.1}}
    assert train_seconds(resumed) == pytest.approx(150.5)  # the last process trained no step
    assert train_seconds({"steps": [], "timing": {"train_s": 7.0}}) == 7.0


def test_ablations_pair_with_lopd_of_the_same_seed_at_each_shared_budget():
    from benchmarks import learning_report as lr

    warm = _summary(lr.WARM, 0, 0, {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0})
    lopd = _summary("lopd", 1, 96, {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0},
                    curve=[(32, {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0})])
    lopd["steps"] = [{"rollouts": 32 * (i + 1), "delta": d, "beta": b}
                     for i, (d, b) in enumerate([(0.02, 0.03), (0.04, 0.04), (0.0, 0.09)])]
    # the ablation, evaluated at 32 and 96 rollouts; another seed has no LOPD to pair with
    m0 = _summary("m0", 1, 96, {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0},
                  curve=[(32, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0})])
    unpaired = _summary("m0", 2, 96, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    lines = lr.ablation_lines([warm, lopd, m0, unpaired], "lopd", {"m0": "m = 0"})
    rows = [line for line in lines if line.startswith("| m = 0")]
    # 32: (1,1,1,0) vs (0,1,0,0): diffs (1,0,1,0) -> +0.500 +- 0.289; vs warm the same
    assert rows[0] == ("| m = 0 | 1 | 32 | 0.750 | 0.250 | +0.500 +- 0.289 | +0.500 +- 0.289 | "
                       "- | - | 0.020 | 0.030 |")
    # 96: (0,0,0,0) vs (1,1,0,0): diffs (-1,-1,0,0) -> -0.500 +- 0.289; vs warm (0,-1,0,0)
    assert rows[1] == ("| m = 0 | 1 | 96 | 0.000 | 0.500 | -0.500 +- 0.289 | -0.250 +- 0.250 | "
                       "- | - | 0.020 | 0.090 |")
    assert len(rows) == 2
    assert lr.ablation_lines([warm, lopd], "lopd", {"m0": "m = 0"}) == []


def test_curve_and_suites_pick_summaries_by_variant_and_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(learning, "OUT", tmp_path)
    for name, seed in (("grpo", 0), ("grpo", 2), ("lopd", 2)):
        (tmp_path / f"{name}-s{seed}-ww.json").write_text(json.dumps({"name": name, "seed": seed}))
    assert [p.name for p in learning._summaries_of({"grpo"}, None)] == ["grpo-s0-ww.json",
                                                                       "grpo-s2-ww.json"]
    assert [p.name for p in learning._summaries_of({"grpo"}, "2")] == ["grpo-s2-ww.json"]
    assert learning._summaries_of({"grpo"}, "1") == []


def test_summary_updates_keep_what_another_process_wrote_and_reuse_finished_evals(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"name": "x", "curve": [{"step": 8, "success": 0.5}]}))
    # another process added a suite since this one read the summary
    learning.update_summary(path, lambda s: s.setdefault("suites", {}).__setitem__("he", 1))
    learning.update_summary(path, lambda s: s["curve"].append({"step": 16, "success": 0.6}))
    data = json.loads(path.read_text())
    assert data["suites"] == {"he": 1} and [p["step"] for p in data["curve"]] == [8, 16]

    config = {"rollout.max_steps": "6", "rollout.max_new_tokens": "96"}
    spec = learning.eval_spec(config, "toolworld-test", "ckpt/student", tmp_path / "heldout", 1, 8,
                              limit=200)
    assert learning.finished_eval(spec) is None
    from dataclasses import asdict

    result = {"n": 200, "success": 0.25, "reward": 0.3, "per_task": {"t": 1.0}}
    (tmp_path / "heldout").mkdir()
    (tmp_path / "heldout" / "eval.json").write_text(json.dumps(
        {"meta": {**asdict(spec), "seconds": 12.5}, "results": {"toolworld-test": result}}))
    assert learning.finished_eval(spec) == {**result, "seconds": 12.5}
    other = learning.eval_spec(config, "toolworld-test", "other/student", tmp_path / "heldout",
                               1, 8, limit=200)
    assert learning.finished_eval(other) is None  # another student's evaluation is not reused
