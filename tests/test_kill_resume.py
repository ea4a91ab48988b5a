"""kill -9 at any point of a tiny LOPD run, then a restart: the same run as without the kill.

Each case launches ``lopd train`` in a subprocess (``tests/kill_driver.py``) that SIGKILLs
itself at one point: inside the bank-seeding transaction, half-way through writing
``composer_phi0``, half-way through the first or second checkpoint, right after the second
checkpoint, in the middle of step 2, half-way through a metrics line. The run is then started
again -- with ``--resume`` when a checkpoint survived, else plainly (``--resume`` then fails
with one clear line) -- and its metrics, student, composer, optimiser state and phi_0 must
equal those of an uninterrupted run exactly.

The runs are forked from one ``kill_driver.py --serve`` process that has imported torch and
the trainer once (a process per run all the same, killed for real).
"""

import json
import os
from pathlib import Path

import pytest
import torch
from kill_driver import KILL_POINTS, ForkServer

ARGS = ["model.name=tiny-random", "model.dtype=fp32", "model.device=cpu", "optim.steps=3",
        "optim.tasks_per_step=2", "optim.group_size=2", "optim.micro_batch=2",
        "optim.student_lr=0.01", "optim.composer_lr=0.01", "rollout.max_steps=2",
        "rollout.max_new_tokens=8", "data.max_train_tasks=40", "data.eval_tasks=1",
        "method.latent_tokens=4", "method.num_experiences=2", "method.seed_experiences=12",
        "method.cold_start_steps=2", "method.experience_chars=200", "run.threads=1",
        "run.checkpoint_every=1", "run.keep_checkpoints=5", "run.tensorboard=false"]
SURVIVING_CHECKPOINT = {"seeding": None, "phi0": None, "checkpoint-1": None,
                        "checkpoint-2": 1, "after-checkpoint-2": 2, "mid-step-2": 2,
                        "metrics-2": 2}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("LOPD_DEBUG", None)
    forks = ForkServer(env)
    yield forks
    forks.close()


def _lopd(server, point, run, *extra):
    return server.run(point, ["train", *ARGS, f"run.out_dir={run}", *extra], run.parent,
                      timeout=900)


def _outcome(run: Path) -> dict:
    """Everything the run produced that must not depend on a kill."""
    from safetensors.torch import load_file

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    final = run / "checkpoints" / "step-000003"
    tensors = {}
    for name in ("student/adapter_model.safetensors", "composer/composer.safetensors"):
        tensors.update({f"{name}:{k}": v.clone() for k, v in load_file(final / name).items()})
    for k, v in load_file(run / "composer_phi0" / "composer.safetensors").items():
        tensors[f"phi0:{k}"] = v.clone()
    optim = torch.load(final / "optim.pt", weights_only=False)
    for part in ("student", "composer"):
        for index, state in optim[part]["state"].items():
            tensors.update({f"optim:{part}:{index}:{k}": v for k, v in state.items()})
    return {"rows": [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows],
            "tensors": tensors, "state": json.loads((final / "state.json").read_text())}


@pytest.fixture(scope="module")
def straight(tmp_path_factory, server):
    run = tmp_path_factory.mktemp("straight") / "run"
    done = _lopd(server, "none", run)
    assert done.returncode == 0, done.stderr[-3000:]
    return _outcome(run)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_then_restart_repeats_the_straight_run(tmp_path, server, straight, point):
    run = tmp_path / "run"
    killed = _lopd(server, point, run)
    assert killed.returncode == -9, (point, killed.stderr[-3000:])
    from lopd.checkpoint import latest_checkpoint

    survivor = latest_checkpoint(run)
    expected = SURVIVING_CHECKPOINT[point]
    assert (survivor.name if survivor else None) == (f"step-{expected:06d}" if expected else None)
    if expected is None:
        refused = _lopd(server, "none", run, "--resume")
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "Traceback" not in refused.stderr and "--resume" in refused.stderr
        again = _lopd(server, "none", run)
    else:
        again = _lopd(server, "none", run, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    got = _outcome(run)
    assert got["rows"] == straight["rows"]
    assert got["state"] == straight["state"]
    assert got["tensors"].keys() == straight["tensors"].keys()
    for key, value in straight["tensors"].items():
        assert torch.equal(value, got["tensors"][key]), key
