"""Load a policy to act with: a base model, a warm start, a trained student.

Every path that turns a run or an adapter back into a model goes through here, so evaluation,
export and inspection see exactly the weights training used:

- ``load_policy(model, adapter, init_adapter)``: the base, with the warm start ``init_adapter``
  merged first (the initial policy of a run) and then ``adapter`` (a trained LoRA student, or
  ``lopd sft``'s output on its own) merged on top.
- ``load_run_policy(run_dir)``: the newest checkpoint's student of a run, rebuilt from the run's
  resolved ``config.yaml`` (model name, ``model.init_adapter``, LoRA or full student). A LoRA
  student trained on a warm start is a delta on the *merged* warm-started weights, so the warm
  start must be merged before it (``lopd.models.load_model``).
"""

from __future__ import annotations

from pathlib import Path


def load_policy(model: str, adapter: str = "", dtype: str = "auto", device: str = "auto",
                init_adapter: str = ""):
    """``(model, tokenizer)`` on ``device``: base + ``init_adapter`` merged + ``adapter`` merged
    (each optional), in eval mode, ready for fast generation."""
    from lopd.models import load_model, merge_adapter

    policy, tokenizer = load_model(model, dtype=dtype, device=device, init_adapter=init_adapter)
    if adapter:
        policy = merge_adapter(policy, adapter)
    return policy, tokenizer


def run_config(run_dir: str | Path) -> dict:
    """The resolved config a run was started with (``RUN/config.yaml``) as a dict."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a lopd run directory (no config.yaml)")
    return yaml.safe_load(path.read_text())


def run_student_dir(run_dir: str | Path) -> Path:
    """The newest complete checkpoint's ``student/`` directory of a run."""
    from lopd.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"{run_dir} has no complete checkpoint under checkpoints/")
    return checkpoint / "student"


def load_run_policy(run_dir: str | Path, dtype: str = "auto", device: str = "auto"):
    """``(model, tokenizer)``: a run's newest trained student, warm start included."""
    from lopd.models import load_model

    config = run_config(run_dir)["model"]
    student = run_student_dir(run_dir)
    if (student / "adapter_config.json").is_file():
        return load_policy(config["name"], str(student), dtype, device,
                           init_adapter=config.get("init_adapter", ""))
    from lopd.fsdp import is_sharded_dir, load_sharded_policy

    if is_sharded_dir(student):  # dist.strategy=fsdp: every process's shards
        return load_sharded_policy(config, student, dtype, device)
    # full fine-tuning: the checkpoint holds the whole student (warm start already in it)
    return load_model(str(student), dtype=dtype, device=device)
