"""Sharded full fine-tuning (``dist.strategy=fsdp``, ``lopd.fsdp``) on 2 CPU processes (gloo).

- one sharded LOPD step (activation checkpointing on) gives the losses and the updated student
  and composer of one process on the same global batch (``tests/fsdp_driver.py``);
- the sharded checkpoint exports a plain HF model equal to the trained student;
- a run launched with the shipped accelerate FSDP config and resumed from its sharded
  checkpoint (under torchrun) repeats the uninterrupted run exactly.

Each launch starts two interpreters (about 30 s here); the in-process checks take seconds.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fsdp_driver import main as run_step

from lopd.config import ConfigError, load_config
from lopd.fsdp import check, precision_policy, resolve_strategy

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.name=tiny-random", "model.dtype=fp32", "model.student=full",
    "optim.tasks_per_step=4", "optim.group_size=2", "optim.micro_batch=2",
    "optim.student_lr=0.001", "optim.composer_lr=0.001", "rollout.max_steps=2",
    "rollout.max_new_tokens=8", "data.max_train_tasks=40", "data.eval_tasks=1",
    "method.latent_tokens=4", "method.num_experiences=2", "method.seed_experiences=12",
    "method.cold_start_steps=0", "method.experience_chars=200", "run.threads=1",
    "run.tensorboard=false",
]


def _launch(args: list[str], launcher: str = "torchrun") -> None:
    """Run ``args`` in 2 processes: torchrun, or accelerate with the 8-GPU FSDP config."""
    if launcher == "torchrun":
        prefix = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                  "--nproc_per_node", "2"]
    else:
        prefix = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
                  str(ROOT / "configs/accelerate/8gpu-full-fsdp.yaml"), "--num_processes", "2",
                  "--main_process_port", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(prefix + args, capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-4000:]


# -- configuration ---------------------------------------------------------------------------
def test_invalid_combinations_fail_fast(monkeypatch):
    with pytest.raises(ConfigError, match="model.student must be full"):
        load_config(None, ["dist.strategy=fsdp", "model.student=lora"])
    with pytest.raises(ConfigError, match="dist.strategy must be"):
        load_config(None, ["dist.strategy=zero3"])
    with pytest.raises(ConfigError, match="optim.composer_recompute"):
        load_config(None, ["dist.strategy=fsdp", "model.student=full",
                           "optim.composer_recompute=false"])
    config = load_config(None, ["dist.strategy=fsdp", "model.student=full",
                                "optim.tasks_per_step=3"])
    with pytest.raises(ConfigError, match="at least 2 processes"):
        check(config)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="optim.tasks_per_step must be a multiple"):
        check(config)
    auto_lora = load_config(None, [])  # the defaults: a LoRA student
    assert resolve_strategy("auto") == "ddp"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # accelerate launch, FSDP config
    assert resolve_strategy("auto") == "fsdp"
    with pytest.raises(ConfigError, match="model.student must be full with dist.strategy=auto"):
        check(auto_lora)


def test_bf16_compute_on_fp32_master_weights():
    policy = precision_policy("bf16-autocast", torch.device("cpu"))
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32
    assert precision_policy("fp32", torch.device("cpu")).param_dtype is None


# -- one step, export ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sharded_step(tmp_path_factory):
    """One LOPD step on 2 processes with FSDP and activation checkpointing."""
    out = tmp_path_factory.mktemp("fsdp") / "sharded"
    _launch([str(ROOT / "tests/fsdp_driver.py"), str(out), "method.name=lopd",
             "method.beta_init=0.5", "dist.strategy=fsdp", "optim.activation_checkpointing=true",
             *TINY])
    return out


def test_one_sharded_step_equals_one_process(sharded_step, tmp_path):
    single = tmp_path / "single"
    run_step(str(single), ["method.name=lopd", "method.beta_init=0.5", *TINY])
    one, two = (torch.load(d / "result.pt") for d in (single, sharded_step))
    assert one["losses"]["distill"] > 1.0  # a real signal, far above float rounding
    for key, value in one["losses"].items():
        assert two["losses"][key] == pytest.approx(value, rel=1e-5, abs=1e-9), key
    assert one["student"].keys() == two["student"].keys()
    moved = max((one["student"][k] - one["before"][k]).abs().max() for k in one["student"])
    assert moved > 1e-4
    for part in ("student", "composer"):
        for key, value in one[part].items():
            torch.testing.assert_close(two[part][key], value, rtol=1e-4, atol=1e-5)


def test_sharded_run_exports_the_trained_model(sharded_step, tmp_path):
    from transformers import AutoModelForCausalLM

    from lopd.policy import export_student

    out = export_student(sharded_step, tmp_path / "export")
    assert not list(out.glob("*.distcp"))
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    trained = torch.load(sharded_step / "result.pt")["student"]
    assert exported.keys() == trained.keys()
    assert all(torch.equal(exported[k], trained[k]) for k in trained)


# -- resume ----------------------------------------------------------------------------------
def _rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def _shards(directory: Path) -> dict:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flat = directory.with_suffix(".pt")
    dcp_to_torch_save(directory, flat)
    return torch.load(flat, weights_only=False)


def _assert_equal(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_equal(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a == b


def test_sharded_checkpoint_resumes_exactly(tmp_path):
    train = ["-m", "lopd.cli", "train", "method.name=opsd", "optim.steps=2",
             "run.checkpoint_every=1", "run.keep_checkpoints=5", *TINY]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _launch([*train, f"run.out_dir={straight}"], launcher="accelerate")  # auto -> fsdp
    shutil.copytree(straight, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step-000002")
    _launch([*train, "--resume", "dist.strategy=fsdp", f"run.out_dir={resumed}"])
    assert _rows(straight) == _rows(resumed)
    assert [row["step"] for row in _rows(straight)] == [0, 1, 2]  # two steps, then the eval
    last = "checkpoints/step-000002"
    for part in ("student", "student_optim"):
        _assert_equal(_shards(straight / last / part), _shards(resumed / last / part))
