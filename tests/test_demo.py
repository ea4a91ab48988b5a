"""`lopd demo --quick` runs the whole pipeline on the tiny model and writes its report."""

import json

import pytest

from lopd.cli import main
from lopd.demo import demo_config
from lopd.evaluate import paired_gain


def test_quick_demo_writes_report_and_plot(tmp_path):
    assert main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "| warm start |" in report and "| after grpo |" in report
    assert "Paired gain on the same tasks:" in report
    assert (tmp_path / "reward_curve.png").stat().st_size > 1000
    assert (tmp_path / "grpo" / "checkpoints").is_dir()
    rows = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert sum("eval/success" in row for row in rows) == 2  # before and after
    heldout = json.loads((tmp_path / "heldout.json").read_text())
    assert heldout["before"].keys() == heldout["after"].keys() and len(heldout["before"]) == 6


def test_quick_lopd_demo_seeds_bank_and_cold_starts(tmp_path):
    assert main(["demo", "--quick", "--method", "lopd", "--out", str(tmp_path)]) == 0
    assert "| after lopd |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "lopd" / "bank.sqlite").is_file()
    assert (tmp_path / "lopd" / "coldstart.json").is_file()


def test_full_demo_setting_is_the_sweeps_learning_setting_at_half_its_lr(tmp_path):
    config = demo_config(tmp_path, quick=False)
    assert (config.method.name, config.optim.student_lr, config.rollout.temperature) == ("grpo", 2.5e-4, 0.7)
    assert config.optim.steps == 8 and config.run.checkpoint_every == 8  # 256 rollouts
    assert (config.data.train_max_tier, config.optim.tasks_per_step, config.optim.group_size) == (1, 4, 8)
    assert config.rollout.train_max_steps == 3 and config.rollout.max_steps == 3
    assert config.rollout.max_new_tokens == 96 and config.rollout.eval_max_new_tokens == 64
    assert config.data.eval_suite == "toolworld-test-tier1" and config.data.eval_tasks >= 100
    assert not config.optim.one_domain_batches  # the learner that gained on every seed
    assert not config.rollout.score_truncated  # an episode cut by the turn cap scores 0
    assert config.run.seed == 0 and demo_config(tmp_path, quick=False, seed=3).run.seed == 3


def test_dtype_reaches_the_config_and_the_cli_offers_the_models_choices(tmp_path, capsys):
    from lopd.cli import DTYPES
    from lopd.models import DTYPE_CHOICES

    assert demo_config(tmp_path, quick=False, dtype="fp32").model.dtype == "fp32"
    assert demo_config(tmp_path, quick=False).model.dtype == "auto"
    assert DTYPES == DTYPE_CHOICES
    assert main(["demo", "--quick", "--dtype", "fp16", "--out", str(tmp_path)]) != 0
    assert "--dtype: invalid choice: 'fp16'" in capsys.readouterr().err


def test_unknown_method_fails_naming_the_field(tmp_path):
    with pytest.raises(Exception, match="method.name"):
        demo_config(tmp_path, quick=True, method="ppo")


def test_paired_gain_by_hand():
    before = {"per_task": {"a": 0.0, "b": 1.0, "c": 0.0}}
    after = {"per_task": {"a": 1.0, "b": 1.0, "c": 1.0}}
    gain, se, _ = paired_gain(after["per_task"], before["per_task"])
    assert gain == pytest.approx(2 / 3)
    # diffs 1, 0, 1: sample variance 1/3, se = sqrt(1/3 / 3) = 1/3
    assert se == pytest.approx(1 / 3)
