"""Persisting a run's state: a ``Runtime`` saved to an atomic checkpoint and restored from the
newest intact one (``lopd.checkpoint`` writes and checks the folders).

A checkpoint holds the student (PEFT adapter, full HF directory, or FSDP shards), the
composer, both optimisers, beta and its history, the RNG streams and the resolved config. On
restore the experience bank and the skill library forget the rows added after the checkpoint's
step, and ``metrics.jsonl`` forgets its later lines, so a resumed run repeats the uninterrupted
one.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lopd.checkpoint import rng_state, save_checkpoint, set_rng_state
from lopd.config import save_config
from lopd.models import STUDENT
from lopd.runtime import Runtime


def save_run(rt: Runtime, step: int, rollouts: int, beta: float,
             beta_history: list[float]) -> Path:
    """Write ``RUN/checkpoints/step-NNNNNN`` (keep-last-N); returns its path."""
    def student(path: Path) -> None:
        if rt.config.model.student == "full":
            rt.model.save_pretrained(path)
        else:
            rt.model.save_pretrained(path, selected_adapters=[STUDENT])
        rt.tokenizer.save_pretrained(path)

    def optim(path: Path) -> None:
        torch.save({"student": None if rt.sharded else rt.student_opt.state_dict(),
                    "composer": rt.composer_opt.state_dict() if rt.composer_opt else None},
                   path)

    state = {"step": step, "rollouts": rollouts, "beta": beta, "beta_history": beta_history}
    parts = {
        "student": student,
        "optim.pt": optim,
        "state.json": lambda p: p.write_text(json.dumps(state)),
        "rng.pt": lambda p: torch.save(rng_state(), p),
        "config.yaml": lambda p: save_config(rt.config, p),
    }
    if rt.composer is not None:
        parts["composer"] = lambda p: rt.composer.save(p)
    shared = []
    if rt.sharded:  # every process writes its shards of the student and its optimiser
        from lopd.fsdp import save_student

        del parts["student"]
        shared.append(lambda folder: save_student(rt.model, rt.student_opt, folder))
    return save_checkpoint(rt.out, step, parts, keep=rt.config.run.keep_checkpoints,
                           shared=shared)


def restore_run(rt: Runtime) -> tuple[int, int, float, list[float]]:
    """Load the newest intact checkpoint (a damaged one is reported in one line and the one
    before it is used); the bank and the skills forget rows added after it. Returns (step,
    rollouts, beta, beta history)."""
    from lopd.checkpoint import all_checkpoints, checkpoint_problem
    from lopd.run_dir import notice, one_line, trim_metrics, unreadable_errors

    for checkpoint in reversed(all_checkpoints(rt.out)):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            try:
                state = _load_checkpoint(rt, checkpoint)
                break
            except unreadable_errors() as error:  # fall back to an older one
                problem = f"unreadable ({one_line(error)})"
        notice(f"checkpoint {checkpoint} is {problem}: skipping it")
    else:
        raise FileNotFoundError(
            f"--resume: no usable checkpoint under {rt.out}/checkpoints; "
            "start the run again without --resume")
    if rt.bank is not None:
        rt.bank.rollback_to_step(state["step"] - 1)
        rt.retriever.sync()
    if rt.skills is not None:
        rt.skills.rollback(state["step"] - 1)
    trim_metrics(rt.out / "metrics.jsonl", state["step"])
    return state["step"], state["rollouts"], state["beta"], state["beta_history"]


def _load_checkpoint(rt: Runtime, checkpoint: Path) -> dict:
    """Student, composer, optimisers and RNG streams from ``checkpoint``; its state.json."""
    state = json.loads((checkpoint / "state.json").read_text())
    if rt.sharded:
        from lopd.fsdp import load_student

        load_student(rt.model, rt.student_opt, checkpoint)
    else:
        _load_student(rt, checkpoint / "student")
    if rt.composer is not None:
        rt.composer.load(checkpoint / "composer")
    optim = torch.load(checkpoint / "optim.pt", weights_only=False, map_location="cpu")
    if not rt.sharded:
        rt.student_opt.load_state_dict(optim["student"])
    if rt.composer_opt is not None and optim["composer"] is not None:
        rt.composer_opt.load_state_dict(optim["composer"])
    set_rng_state(torch.load(checkpoint / "rng.pt", weights_only=False))
    return state


def _load_student(rt: Runtime, directory: Path) -> None:
    if rt.config.model.student == "full":
        from safetensors.torch import load_file

        state = {}
        shards = sorted(directory.glob("*.safetensors"))
        if not shards:
            raise FileNotFoundError(f"no *.safetensors under {directory}")
        for shard in shards:
            state.update(load_file(shard))
        rt.model.load_state_dict(state, strict=False)
        return
    load_adapter_weights(rt.model, directory, STUDENT)


def load_adapter_weights(model, directory: Path, adapter_name: str) -> None:
    """Load a saved PEFT adapter's weights into an existing adapter of ``model``."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(str(Path(directory) / "adapter_model.safetensors"))
    set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
