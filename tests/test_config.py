"""Configs: presets load, overrides apply, bad values fail with the field named."""

from pathlib import Path

import pytest

from lopd.cli import build_parser, main
from lopd.config import ConfigError, describe, load_config, save_config

PRESETS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_presets_load(preset):
    assert load_config(preset).method.name == "lopd"


def test_overrides_and_round_trip(tmp_path):
    config = load_config(None, ["optim.steps=7", "method.name=grpo", "rollout.temperature=0.7",
                                "run.tensorboard=false"])
    assert (config.optim.steps, config.method.name, config.rollout.temperature) == (7, "grpo", 0.7)
    save_config(config, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == config


@pytest.mark.parametrize("override, field", [
    ("method.name=ppo", "method.name"),
    ("optim.steps=ten", "optim.steps"),
    ("rollout.top_p=1.5", "rollout.top_p"),
    ("method.margin=-1", "method.margin"),
    ("model.dtype=fp8", "model.dtype"),
    ("rollout.eval_max_new_tokens=-1", "rollout.eval_max_new_tokens"),
    ("model.device=tpu", "model.device"),
    ("model.device=cuda:x", "model.device"),
    ("optim.share_prefix=maybe", "optim.share_prefix"),
    ("optim.nope=1", "optim.nope"),
    ("bogus.steps=1", "bogus"),
    ("run.tensorboard=maybe", "run.tensorboard"),
])
def test_bad_values_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(None, [override])


def test_grpo_needs_groups():
    with pytest.raises(ConfigError, match="optim.group_size"):
        load_config(None, ["method.name=grpo", "optim.group_size=1"])


def test_every_field_is_documented():
    text = describe()
    for line in text.splitlines():
        if line.startswith("      "):
            assert line.strip(), "a field without a docstring"


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("optim: {steps: 3\n", "not valid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("optim: 3\n", "must be a mapping"),
    ("optim:\n  7: 3\n", "names must be words"),
    (b"\xff\xfe\x00", "not a text file"),
])
def test_config_file_errors_say_what_is_wrong(tmp_path, content, words):
    path = tmp_path / "c.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=words):
        load_config(path)


def test_config_path_that_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_empty_config_file_is_the_defaults(tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    assert load_config(tmp_path / "empty.yaml") == load_config(None)


def test_override_that_is_not_yaml():
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(None, ["rollout.temperature={"])


def test_cli_reports_config_errors(capsys):
    assert main(["train", "optim.steps=x"]) == 2
    assert "optim.steps" in capsys.readouterr().err


def test_cli_help_lists_commands():
    text = build_parser().format_help()
    for command in ("demo", "train", "eval", "bank", "inspect", "sft", "export", "info"):
        assert command in text


def test_share_prefix_takes_yaml_booleans():
    assert load_config(None, ["optim.share_prefix=true"]).optim.share_prefix == "true"
    assert load_config(None, ["optim.share_prefix=False"]).optim.share_prefix == "false"
    assert load_config(None, []).optim.share_prefix == "auto"


def test_devices_resolve():
    import torch

    from lopd.models import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_names_the_field(tmp_path):
    from lopd.trainer import Trainer

    config = load_config(None, ["model.name=tiny-random", "model.device=cuda",
                                f"run.out_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"model\.device"):
        Trainer(config)
    assert not (tmp_path / "run").exists()  # a failed start leaves no run directory
