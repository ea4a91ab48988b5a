"""Building a run's state: the model (warm start merged, student adapter or full copy), the
task pools, and the parts the method adds, assembled into a ``lopd.runtime.Runtime``.

The warm start (``model.init_adapter``) is merged into the base before anything else, so the
teacher, the composer's encoder and the cold start all run on the initial policy. Under
``dist.strategy=fsdp`` the runtime is sharded before the student's optimiser is made.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from lopd.config import Config, ConfigError
from lopd.models import STUDENT, resolve_dtype
from lopd.runtime import Runtime


def _build_model(config: Config):
    from lopd.models import (
        LoraSpec,
        add_adapter,
        enable_activation_checkpointing,
        freeze,
        load_model,
        resolve_device,
        setup_runtime,
    )

    setup_runtime(threads=config.run.threads, seed=config.run.seed,
                  deterministic=config.run.deterministic,
                  keep_freed_memory=config.run.keep_freed_memory)
    try:
        device = resolve_device(config.model.device)
    except ValueError as error:
        raise ConfigError(f"model.device: {error}") from None
    weights_dtype = "bf16" if resolve_dtype(config.model.dtype, device) == "bf16" else "fp32"
    # the warm start is merged into the base: the initial policy theta_bar (teacher, composer
    # encoder, cold start) is the warm-started model, and the student starts from it
    model, tokenizer = load_model(config.model.name, dtype=weights_dtype, device=str(device),
                                  init_adapter=config.model.init_adapter)
    teacher = None
    if config.model.student == "full":
        teacher = freeze(copy.deepcopy(model))
        model.requires_grad_(True)
    else:
        model = add_adapter(model, STUDENT, LoraSpec(r=config.model.lora_r, alpha=config.model.lora_alpha))
    if config.optim.activation_checkpointing:
        for each in (model, teacher):
            if each is not None:
                enable_activation_checkpointing(each)
    return model, tokenizer, teacher


def build_runtime(config: Config, out: Path) -> Runtime:
    """Load the model, tasks, and the method's extra parts (composer, bank, skills, demos)."""
    from lopd.chat import ChatRenderer
    from lopd.envs import check_references, task_pool
    from lopd.framing import LatentPlacement
    from lopd.fsdp import check, resolve_strategy, shard_runtime
    from lopd.method_parts import attach_demos, attach_latent

    sharded = resolve_strategy(config.dist.strategy) == "fsdp"
    if sharded:
        check(config)
    model, tokenizer, teacher = _build_model(config)
    train_tasks = task_pool(config.data.train_suite, config.data.max_train_tasks,
                            config.data.train_max_tier)
    check_references(config.method.name, train_tasks, config.data.train_suite)
    eval_tasks = task_pool(config.data.eval_suite, config.data.eval_tasks,
                           config.data.eval_max_tier)
    rt = Runtime(config, out, model, tokenizer, ChatRenderer(tokenizer), train_tasks, eval_tasks,
                 teacher_model=teacher,
                 placement=LatentPlacement.build(config.method.latent_placement, tokenizer))
    method = config.method.name
    if method == "lopd":
        attach_latent(rt)
    elif method == "sdft":
        attach_demos(rt)
    elif method == "skill-sd":
        from lopd.skills import SkillLibrary

        rt.skills = SkillLibrary(out / "skills.sqlite", rt, config.method.num_experiences)
    if sharded:  # before the optimiser is made, so that its moments are sharded too
        shard_runtime(rt)
    params = rt.student_parameters()
    rt.student_opt = torch.optim.AdamW(params, lr=config.optim.student_lr,
                                       weight_decay=config.optim.weight_decay)
    return rt
