"""Exact resume on the tiny model, and recovery of damaged run directories.

A resumed run must repeat the uninterrupted one bit for bit on a CPU: metrics, student and
composer weights and optimiser states are compared with exact equality (``torch.equal``, ``==``
on floats), since the distillation terms of the tiny model are ~1e-6 and any tolerance hides a
difference there. The kill -9 tests are in ``tests/test_kill_resume.py``.
"""

import json

import pytest
import torch
from test_trainer import _config, _with_one_success_per_group

from lopd.trainer import Trainer

CPU = {"model.device": "cpu"}


def _rows(trainer):
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def _state(trainer):
    rt = trainer.rt
    params = rt.student_parameters() + (rt.composer.trainable_parameters() if rt.composer else [])
    optimisers = [rt.student_opt] + ([rt.composer_opt] if rt.composer_opt else [])
    moments = [t for opt in optimisers for state in opt.state.values() for t in state.values()]
    return [p.detach() for p in params], moments


def _assert_same(straight, resumed):
    assert _rows(straight) == _rows(resumed)
    (params_a, moments_a), (params_b, moments_b) = _state(straight), _state(resumed)
    assert len(params_a) == len(params_b) and len(moments_a) == len(moments_b)
    for a, b in zip(params_a + moments_a, params_b + moments_b):
        assert a.dtype == b.dtype and torch.equal(a, b)


def _trainer(path, method, steps, resume=False, **extra):
    trainer = Trainer(_config(path, method, steps=steps, **CPU, **extra), resume=resume)
    if method == "grpo":  # the tiny model never succeeds: give GRPO a signal to learn from
        _with_one_success_per_group(trainer)
    return trainer


@pytest.mark.parametrize("method", ["lopd", "grpo"])
def test_resume_is_bit_exact(tmp_path, method):
    straight = _trainer(tmp_path / "a", method, 3)
    straight.fit()
    _trainer(tmp_path / "b", method, 2).fit()
    resumed = _trainer(tmp_path / "b", method, 3, resume=True)
    assert resumed.step == 2
    resumed.fit()
    assert any(row["distill"] != 0 for row in _rows(straight) if "distill" in row) or method == "grpo"
    _assert_same(straight, resumed)


def test_modes_are_the_same_with_or_without_a_cold_start(tmp_path):
    """The cold start leaves the composer in eval mode; a run that skips it (phi_0 already
    there) must be in the same modes, or kernels differ (the cause of inexact resumes)."""
    first = _trainer(tmp_path, "lopd", 0)
    again = _trainer(tmp_path, "lopd", 0)
    for trainer in (first, again):
        for module in (trainer.rt.model, trainer.rt.composer, trainer.rt.anchor_composer):
            assert not any(m.training for m in module.modules())


def test_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, capsys):
    _trainer(tmp_path, "lopd", 2).fit()
    optim = tmp_path / "lopd" / "checkpoints" / "step-000002" / "optim.pt"
    optim.write_bytes(optim.read_bytes()[:100])  # truncated
    resumed = _trainer(tmp_path, "lopd", 2, resume=True)
    assert resumed.step == 1
    err = capsys.readouterr().err
    assert "step-000002" in err and "optim.pt" in err and "Traceback" not in err


def test_unreadable_checkpoint_falls_back(tmp_path, capsys):
    """Same sizes, garbage content: the load fails and the one before is used."""
    _trainer(tmp_path, "grpo", 2).fit()
    rng = tmp_path / "grpo" / "checkpoints" / "step-000002" / "rng.pt"
    rng.write_bytes(b"\0" * rng.stat().st_size)
    assert _trainer(tmp_path, "grpo", 2, resume=True).step == 1
    assert "unreadable" in capsys.readouterr().err


def test_damaged_phi0_is_rebuilt_identically(tmp_path, capsys):
    from safetensors.torch import load_file

    _trainer(tmp_path, "lopd", 0)
    weights = tmp_path / "lopd" / "composer_phi0" / "composer.safetensors"
    original = {k: v.clone() for k, v in load_file(weights).items()}  # not the mmapped file
    weights.write_bytes(weights.read_bytes()[:1000])
    _trainer(tmp_path, "lopd", 0)
    assert "composer_phi0" in capsys.readouterr().err
    rebuilt = load_file(weights)
    assert original.keys() == rebuilt.keys()
    assert all(torch.equal(original[k], rebuilt[k]) for k in original)


def test_resume_without_a_checkpoint_fails_before_building(tmp_path, monkeypatch):
    import lopd.trainer

    monkeypatch.setattr(lopd.trainer, "build_runtime", lambda *a: pytest.fail("model built"))
    with pytest.raises(FileNotFoundError, match="without --resume"):
        Trainer(_config(tmp_path, "lopd", steps=1), resume=True)
    assert not (tmp_path / "lopd").exists()  # a failed start leaves no run directory


def test_torn_metrics_line_and_leftover_writes_are_cleaned(tmp_path):
    _trainer(tmp_path, "grpo", 2).fit()
    run = tmp_path / "grpo"
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 2, "rew')  # a kill in the middle of an append
    (run / "checkpoints" / ".tmp-step-000003").mkdir()
    resumed = _trainer(tmp_path, "grpo", 2, resume=True)
    assert [row["step"] for row in _rows(resumed)] == [0, 1]
    assert not (run / "checkpoints" / ".tmp-step-000003").exists()


def test_fresh_start_in_a_used_directory_starts_over(tmp_path, capsys):
    _trainer(tmp_path, "grpo", 2).fit()
    again = _trainer(tmp_path, "grpo", 1)
    assert "starting" in capsys.readouterr().err
    assert not (tmp_path / "grpo" / "checkpoints").exists()
    assert not again.metrics_path.exists()
