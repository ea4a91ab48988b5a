"""Two-process data parallelism under torchrun (gloo) on the tiny model."""

import json
import os
import subprocess
import sys

import pytest

from lopd.distributed import shard, world


def test_single_process_defaults():
    assert world() == (0, 1)
    assert shard([1, 2, 3]) == [1, 2, 3]


def test_a_non_zero_rank_builds_a_complete_model_cache(tmp_path, monkeypatch):
    """The rank that holds the cache lock writes the whole model, even where transformers
    would write a model's files on rank 0 only (a rank-1 build once left a cache without
    config.json, and every rank then failed to load it)."""
    import torch.distributed

    from lopd.models import _is_complete, resolve_model_dir

    smollm2 = resolve_model_dir("smollm2-135m")  # the tokenizer's source, shared
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / smollm2.name).symlink_to(smollm2)
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)  # as rank 1 of 2
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    directory = resolve_model_dir("tiny-random")
    assert _is_complete(directory) and (directory / "config.json").is_file()


@pytest.mark.parametrize("method", ["lopd"])
def test_two_processes_train_and_agree(tmp_path, method):
    out = tmp_path / "run"
    # torchrun: `accelerate launch --cpu` starts one process whatever --num_processes says
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "lopd.cli", "train",
        f"method.name={method}", "model.name=tiny-random", "model.dtype=fp32", "optim.steps=2",
        "optim.tasks_per_step=2", "optim.group_size=2", "rollout.max_steps=2",
        "rollout.max_new_tokens=8", "data.max_train_tasks=30", "data.eval_tasks=2",
        "method.latent_tokens=4", "method.num_experiences=2", "method.seed_experiences=10",
        "method.cold_start_steps=1", "run.threads=1", "run.tensorboard=false",
        f"run.out_dir={out}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward" in r]
    assert [r["step"] for r in train] == [0, 1]
    assert all(r["processes"] == 2 for r in train)
    assert train[-1]["rollouts"] == 8  # counted over both processes: 2 tasks x 2 rollouts x 2 steps
    assert (out / "checkpoints").is_dir()
