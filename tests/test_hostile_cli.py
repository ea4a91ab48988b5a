"""Hostile command lines: every bad input is one line on stderr, exit status 2, no traceback,
no model loaded, and no run directory left behind."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lopd.cli import main, parse_args
from lopd.config import load_config, save_config


@pytest.fixture(autouse=True)
def _no_model_loads(monkeypatch):
    """Every check must happen before a model loads: loading one fails the test."""
    import lopd.models

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(lopd.models, "load_model", refuse)
    monkeypatch.setattr(lopd.models, "load_tokenizer", refuse)


def _lopd_run(root, method="lopd", checkpoint=False):
    """A run directory with config.yaml (and a checkpoint that is only half written)."""
    run = root / f"{method}-run"
    run.mkdir()
    save_config(load_config(None, [f"method.name={method}", "model.name=tiny-random"]),
                run / "config.yaml")
    if checkpoint:
        (run / "checkpoints" / "step-000001").mkdir(parents=True)  # no COMPLETE marker
    return run


def _files(root):
    (root / "a-file").write_text("x")
    (root / "bad.yaml").write_text("optim:\n  steps: [1, 2\n")
    (root / "list.yaml").write_text("- optim\n- steps\n")
    (root / "unknown-section.yaml").write_text("nonsense:\n  steps: 3\n")
    (root / "unknown-field.yaml").write_text("optim:\n  stepz: 3\n")
    (root / "binary.yaml").write_bytes(b"\xff\xfe\x00\x81garbage")
    (root / "number-key.yaml").write_text("1: 2\n")
    (root / "tabs.yaml").write_text("optim:\n\tsteps: 3\n")
    (root / "not-a-model").mkdir()
    _lopd_run(root)
    _lopd_run(root, "grpo", checkpoint=True)
    from lopd.experience.bank import ExperienceBank, bank_path

    ExperienceBank(bank_path(root / "lopd-run")).close()


def _cases(root):
    out = f"run.out_dir={root / 'new-run'}"
    tiny = "model.name=tiny-random"
    lopd_run, grpo_run = root / "lopd-run", root / "grpo-run"
    return {
        "missing config": ["train", "--config", str(root / "nope.yaml"), out],
        "config is a directory": ["train", "--config", str(root), out],
        "invalid yaml": ["train", "--config", str(root / "bad.yaml"), out],
        "yaml with tabs": ["train", "--config", str(root / "tabs.yaml"), out],
        "yaml list": ["train", "--config", str(root / "list.yaml"), out],
        "yaml unknown section": ["train", "--config", str(root / "unknown-section.yaml"), out],
        "yaml unknown field": ["train", "--config", str(root / "unknown-field.yaml"), out],
        "binary config": ["train", "--config", str(root / "binary.yaml"), out],
        "numeric key": ["train", "--config", str(root / "number-key.yaml"), out],
        "override without =": ["train", "optim.steps", out],
        "override without section": ["train", "steps=3", out],
        "override unknown field": ["train", "optim.nope=1", out],
        "override bad type": ["train", "optim.steps=ten", out],
        "override bad yaml": ["train", "optim.steps=[", out],
        "model path missing": ["train", f"model.name={root / 'no-model'}", out],
        "model dir without config.json": ["train", f"model.name={root / 'not-a-model'}", out],
        "model path is a file": ["train", f"model.name={root / 'a-file'}", out],
        "run dir is a file": ["train", tiny, f"run.out_dir={root / 'a-file'}"],
        "run dir under a file": ["train", tiny, f"run.out_dir={root / 'a-file' / 'run'}"],
        "resume without checkpoint": ["train", "--resume", tiny, out],
        "resume with a partial checkpoint": ["train", "--resume", tiny,
                                             f"run.out_dir={grpo_run}"],
        "init adapter missing": ["train", tiny, f"model.init_adapter={root / 'none'}", out],
        "unknown train suite": ["train", tiny, "data.train_suite=nope", out],
        "unknown flag": ["train", "--frobnicate", out],
        "unknown method": ["train", "--method", "ppo", out],
        "unknown command": ["frobnicate"],
        "eval adapter missing": ["eval", "--model", "tiny-random", "--adapter", str(root / "x"),
                                 "--out", str(root / "new-run")],
        "eval adapter not peft": ["eval", "--model", "tiny-random", "--adapter",
                                  str(root / "not-a-model"), "--out", str(root / "new-run")],
        "eval unknown suite": ["eval", "--model", "tiny-random", "--suite", "toolworld-test,x",
                               "--out", str(root / "new-run")],
        "eval model missing": ["eval", "--model", str(root / "x"), "--out", str(root / "new-run")],
        "eval negative limit": ["eval", "--model", "tiny-random", "--limit", "-1",
                                "--out", str(root / "new-run")],
        "eval latent memory without run": ["eval", "--latent-memory",
                                           "--out", str(root / "new-run")],
        "eval run without checkpoint": ["eval", "--run", str(lopd_run),
                                        "--out", str(root / "new-run")],
        "eval latent memory of a bare run": ["eval", "--run", str(lopd_run), "--latent-memory",
                                             "--out", str(root / "new-run")],
        "eval overrides not accepted": ["eval", "optim.steps=3", "--out", str(root / "new-run")],
        "export no checkpoint": ["export", "--run", str(lopd_run), "--out", str(root / "new-run")],
        "export not a run": ["export", "--run", str(root / "x"), "--out", str(root / "new-run")],
        "export onto the run": ["export", "--run", str(grpo_run), "--out", str(grpo_run)],
        "inspect unknown task": ["inspect", "--run", str(lopd_run), "--task", "tw-test-nope-1"],
        "inspect grpo run": ["inspect", "--run", str(grpo_run), "--task", "tw-test-banking-3"],
        "inspect not a run": ["inspect", "--run", str(root / "a-file"), "--task", "x"],
        "bank stats not a run": ["bank", "stats", "--run", str(root)],
        "bank query missing": ["bank", "query", "--run", str(root / "x"), "--text", "hi"],
        "bank bad action": ["bank", "drop", "--run", str(root)],
        "bank query without text": ["bank", "query", "--run", str(lopd_run)],
        "bank export onto a folder": ["bank", "export", "--run", str(lopd_run), "--out", str(root)],
        "bank zero neighbours": ["bank", "query", "--run", str(lopd_run), "--text", "x", "-j", "0"],
        "sft model missing": ["sft", "--model", str(root / "x"), "--out", str(root / "new-run")],
        "sft zero steps": ["sft", "--model", "tiny-random", "--steps", "0",
                           "--out", str(root / "new-run")],
        "sft unknown suite": ["sft", "--model", "tiny-random", "--suite", "nope",
                              "--out", str(root / "new-run")],
        "sft out is a file": ["sft", "--model", "tiny-random", "--out", str(root / "a-file")],
        "demo out is a file": ["demo", "--out", str(root / "a-file")],
        "steps not a number": ["sft", "--steps", "many"],
    }


CASE_NAMES = list(_cases(Path("/root-of-cases")))


def test_there_are_many_cases():
    assert len(CASE_NAMES) >= 40


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, name):
    _files(tmp_path)
    argv = _cases(tmp_path)[name]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("lopd: error: ") and "Traceback" not in captured.err
    assert len(lines[0]) > len("lopd: error: ") + 10
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created or left
    assert captured.out == ""


def test_overrides_are_accepted_anywhere():
    args = parse_args(["train", "optim.steps=4", "--resume", "run.seed=3", "--out", "x",
                       "model.name=tiny-random"])
    assert args.resume and args.out == "x"
    assert args.overrides == ["optim.steps=4", "run.seed=3", "model.name=tiny-random"]


def test_messages_name_the_problem(tmp_path, capsys):
    _files(tmp_path)
    cases = _cases(tmp_path)
    expected = {
        "missing config": "does not exist", "config is a directory": "is a directory",
        "invalid yaml": "not valid YAML", "model path missing": "model.name",
        "run dir is a file": "run.out_dir", "resume without checkpoint": "--resume",
        "init adapter missing": "model.init_adapter", "export no checkpoint": "checkpoint",
        "inspect unknown task": "--task", "bank stats not a run": "bank",
        "unknown flag": "--frobnicate", "override bad yaml": "not valid YAML",
    }
    for name, words in expected.items():
        main(cases[name])
        assert words in capsys.readouterr().err, name


def test_debug_variable_shows_the_traceback(tmp_path, monkeypatch):
    from lopd.config import ConfigError

    monkeypatch.setenv("LOPD_DEBUG", "1")
    with pytest.raises(ConfigError):
        main(["train", "--config", str(tmp_path / "nope.yaml")])


def test_a_failed_start_after_the_checks_leaves_no_run_directory(tmp_path, monkeypatch):
    """An error while building (after the checks) removes the directory the start created."""
    import lopd.trainer
    from lopd.config import ConfigError

    def broken(config, out):
        assert out.is_dir()  # created for the run, then removed again
        raise ConfigError("model.device: no CUDA device")

    monkeypatch.setattr(lopd.trainer, "build_runtime", broken)
    assert main(["train", "model.name=tiny-random", f"run.out_dir={tmp_path / 'run'}"]) == 2
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [
    ["train", "--config", "/nonexistent/lopd.yaml"],
    ["train", "model.name=/nonexistent/model", "run.out_dir=/nonexistent/run"],
    ["eval", "--adapter", "/nonexistent/adapter"],
])
def test_the_installed_command_prints_one_line(argv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LOPD_DEBUG"}
    done = subprocess.run([sys.executable, "-m", "lopd.cli", *argv], capture_output=True, check=False,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
