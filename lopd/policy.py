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
- ``export_student(run_dir, out)``: that student written out as a PEFT adapter or, merged, as
  a plain HF model directory (``lopd export``).
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


def export_student(run_dir: str | Path, out: str | Path, merge: bool = False) -> Path:
    """Copy the newest checkpoint's student to ``out`` (an HF or PEFT directory).

    With ``merge``, a LoRA student is merged into its base -- warm start (``model.init_adapter``)
    included, merged first as in training -- and saved as a full HF model that
    ``AutoModelForCausalLM.from_pretrained(out)`` loads without lopd; a sharded student
    (``dist.strategy=fsdp``) is read into one process and saved the same way. Without
    ``merge`` a LoRA student is written as its PEFT adapter; when the run had a warm start, that adapter is a
    delta on the *warm-started* base, which ``OUT/lopd_base.json`` names.
    """
    import json
    import shutil

    from lopd.fsdp import is_sharded_dir

    student, out = run_student_dir(run_dir), Path(out)
    is_adapter = (student / "adapter_config.json").is_file()
    shutil.rmtree(out, ignore_errors=True)
    if is_adapter and merge or is_sharded_dir(student):
        merged, tokenizer = load_run_policy(run_dir, dtype="fp32", device="cpu")
        merged.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out
    shutil.copytree(student, out)
    model = run_config(run_dir)["model"]
    init_adapter = model.get("init_adapter", "")
    if is_adapter and init_adapter:
        base = {"model": model["name"], "init_adapter": init_adapter,
                "note": "this adapter applies on top of model + init_adapter merged; "
                        "`lopd export --merge` writes the complete model"}
        (out / "lopd_base.json").write_text(json.dumps(base, indent=2) + "\n")
    return out
