"""Everything a training run holds: model + student adapter, teacher, composer, bank, retriever,
optimisers, rollout backend; and how they are saved and restored.

The trainer (``lopd.trainer``) keeps the algorithm; this module keeps the objects. One base
model is shared: the student is its ``default`` LoRA adapter, the composer's encoder its
``composer`` adapter, the anchor composer phi_0 a frozen ``composer_anchor`` adapter, and the
teacher is the base with adapters disabled. With ``model.student=full`` the student is the
whole model and the teacher a separate frozen copy. A warm start (``model.init_adapter``) is
merged into the base before any of that, so "the base" is the initial policy. The parts each
method adds (LOPD's composer, bank and cold start; SDFT's demonstrations) are assembled in
``lopd.method_parts``.
"""

from __future__ import annotations

import copy
import json
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from lopd import distributed
from lopd.checkpoint import rng_state, save_checkpoint, set_rng_state
from lopd.config import Config, ConfigError, save_config
from lopd.contexts import StepContext, text_context
from lopd.models import model_device, resolve_dtype
from lopd.types import Trajectory

STUDENT = "default"


@dataclass
class Runtime:
    config: Config
    out: Path
    model: Any
    tokenizer: Any
    renderer: Any
    train_tasks: list
    eval_tasks: list
    teacher_model: Any = None
    composer: Any = None
    anchor_composer: Any = None
    provider: Any = None
    bank: Any = None
    retriever: Any = None
    skills: Any = None
    demos: dict = field(default_factory=dict)
    placement: Any = None
    transcripts: Any = None
    student_opt: Any = None
    composer_opt: Any = None
    sharded: bool = False  # dist.strategy=fsdp: student and teacher copy sharded (lopd.fsdp)
    merged: Any = None  # lopd.merged.MergedStudent under rollout.merged_decoding, built on first
    # use; False where the student's adapter cannot be merged
    engine: Any = None  # lopd.vllm_backend.VLLMBackend under rollout.backend=vllm, built on first use

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    @property
    def dtype(self) -> str:
        """``model.dtype`` with ``auto`` resolved for the device the model is on."""
        return resolve_dtype(self.config.model.dtype, self.device)

    @property
    def share_prefix(self) -> bool:
        """``optim.share_prefix`` resolved: ``auto`` shares on CPUs only."""
        from lopd.prefix import sharing_pays_off

        setting = self.config.optim.share_prefix
        if self.sharded:  # the number of prefix segments depends on the data (lopd.fsdp)
            return False
        return sharing_pays_off(self.device) if setting == "auto" else setting == "true"

    def checkpointing(self):
        """The scope of training forwards: layers checkpointed under
        ``optim.activation_checkpointing`` (the model, and the frozen teacher copy of full
        fine-tuning), else nothing changes."""
        from lopd.models import checkpointed

        return checkpointed(self.model, self.teacher_model,
                            enabled=self.config.optim.activation_checkpointing)

    # -- forward passes --------------------------------------------------------------------
    def autocast(self):
        from lopd.models import autocast_context

        return autocast_context(self.dtype, self.device)

    def decoder(self):
        """The model generation runs: under ``rollout.merged_decoding`` (a LoRA student, not
        sharded) the student merged into one plain model (``lopd.merged``), else the model."""
        from lopd.merged import MergedStudent

        if not self.config.rollout.merged_decoding or self.sharded or self.config.model.student != "lora":
            return self.model
        if self.merged is None:
            supported = MergedStudent.supported(self.model, STUDENT)
            self.merged = MergedStudent(self.model, STUDENT) if supported else False
        return self.merged.sync() if self.merged else self.model

    def backend(self):
        """The generation backend over the current student weights: the run's vLLM engine
        under ``rollout.backend`` vllm (``lopd.vllm_backend``), else the HF loop."""
        from lopd.generation import HFBackend
        from lopd.vllm_backend import resolve_backend, runtime_engine

        if not self.sharded and resolve_backend(self.config.rollout.backend) == "vllm":
            return runtime_engine(self)
        return HFBackend(self.decoder(), self.renderer.stop_ids, self.pad_id,
                         autocast=self.dtype == "bf16-autocast")

    def student_parameters(self) -> list[torch.nn.Parameter]:
        if self.config.model.student == "full":
            return [p for p in self.model.parameters() if p.requires_grad]
        return [p for n, p in self.model.named_parameters() if f".{STUDENT}." in n and "lora_" in n]

    def student_logits(self, batch) -> torch.Tensor:
        from lopd.teacher import student_logits

        return student_logits(self.model, batch, positions="supervised",
                              share_prefix=self.share_prefix)

    def teacher_logits(self, batch, context: StepContext, rows: list[int], leaf) -> torch.Tensor:
        from lopd.teacher import pad_context_ids, teacher_logits

        latent = mask = None
        if leaf is not None:
            index = context.row_task[rows].to(leaf.device)
            latent = leaf.index_select(0, index)
            mask = context.task_mask.to(leaf.device).index_select(0, index)
        elif context.text_ids is not None:
            ids = [context.text_ids[r] for r in rows]
            if any(ids):
                latent, mask = pad_context_ids(ids, self.pad_id, batch.input_ids.device)
        if latent is not None and leaf is not None:  # latent placement (lopd.framing)
            embed = (self.teacher_model or self.model).get_input_embeddings()
            batch, latent, mask = self.placement.place(batch, latent, mask, embed)
        return teacher_logits(self.model, batch, latent, mask, positions="supervised",
                              teacher_model=self.teacher_model,
                              share_prefix=self.share_prefix)

    # -- rollouts, bank, context ---------------------------------------------------------------
    def rollout(self, tasks, step: int) -> list[Trajectory]:
        from lopd.envs import make_env
        from lopd.rollout import make_group_envs, run_episodes

        cfg = self.config
        rollout = replace(cfg.rollout, max_steps=cfg.rollout.train_max_steps or cfg.rollout.max_steps)
        envs, groups = make_group_envs(tasks, cfg.optim.group_size, make_env,
                                       rollout.max_steps, seed=step,
                                       max_calls=rollout.max_calls_per_turn)
        self.model.eval()
        with self.whole(self.model):
            return run_episodes(envs, self.backend(), self.renderer, rollout,
                                seed=cfg.run.seed * 1_000_003 + step, groups=groups)

    def whole(self, *models):
        """Under ``dist.strategy=fsdp``, ``models`` gathered whole for the block, so that
        data-dependent forwards (generation, the composer's encoder) need no collective
        (``lopd.fsdp.gathered``); otherwise nothing happens. All processes enter it."""
        if not self.sharded:
            return nullcontext()
        from lopd.fsdp import gathered

        return gathered(*models)

    def update_bank(self, trajs: list[Trajectory], step: int) -> None:
        """Successful rollouts join the experience bank (LOPD) and feed the skill library."""
        from lopd.experience.condense import experience_from_trajectory

        wins = [t for t in trajs if t.success]
        if self.retriever is not None:
            if wins:
                from lopd.method_parts import add_experiences

                add_experiences(self, [experience_from_trajectory(t, step) for t in wins],
                                [t.messages for t in wins])
            if distributed.world()[1] > 1:  # other processes' rows
                distributed.barrier()
                self.retriever.sync()
        if self.skills is not None and wins:
            self.skills.add_from(wins, step)

    def context(self, trajs: list[Trajectory], step: int) -> StepContext:
        method = self.config.method.name
        if method == "lopd" and self.config.method.context == "text":
            return self._experience_text_context(trajs, step)
        if method == "lopd":
            with torch.no_grad() if self.config.optim.composer_recompute else nullcontext():
                return self.provider(trajs, step)
        skills = self.skills.lookup(trajs, step) if self.skills is not None else None
        return text_context(method, trajs, self.renderer, self.config.method.experience_chars,
                            demos=self.demos, skills=skills)

    def _experience_text_context(self, trajs: list[Trajectory], step: int) -> StepContext:
        """Ablation ``method.context=text``: the J experiences the composer would read, shown to
        the teacher as one text block (same insertion point as the baselines' text)."""
        first: dict[int, int] = {}
        tasks = []
        for traj in trajs:
            if traj.group not in first:
                first[traj.group] = len(tasks)
                tasks.append(traj.task)
        found = self.provider.retrieve_texts(tasks, step)
        blocks = [found[first[t.group]] for t in trajs]
        ids = [self.renderer.render_message(experience_text_message(b))[0] if b else []
               for b in blocks]
        return StepContext(active=torch.tensor([bool(b) for b in blocks], dtype=torch.bool),
                           text_ids=ids, texts=blocks)

    def bank_size(self) -> int:
        return self.bank.count() if self.bank is not None else 0

    # -- optimisation --------------------------------------------------------------------------
    def zero_grad(self) -> None:
        self.student_opt.zero_grad(set_to_none=True)
        if self.composer_opt is not None:
            self.composer_opt.zero_grad(set_to_none=True)

    def composer_backward(self, context: StepContext, leaf: torch.Tensor) -> float:
        """Push the accumulated context gradient (and the anchor) through the composer.

        With ``optim.composer_recompute`` the composer runs again with its graph, one chunk of
        ``optim.composer_chunk`` tasks at a time (each chunk's backward frees its graph before
        the next); the anchor is the mean over all tasks either way."""
        if self.composer_opt is None or leaf.grad is None and not self.config.method.anchor_weight:
            return 0.0
        n_tasks = leaf.shape[0]
        chunk = self.config.optim.composer_chunk or n_tasks
        if not self.config.optim.composer_recompute:  # the compose phase kept the graph
            chunk = n_tasks
        anchor = 0.0
        for start in range(0, n_tasks, chunk):
            tasks = slice(start, min(start + chunk, n_tasks))
            anchor += self._composer_chunk_backward(context, leaf, tasks, n_tasks)
        return anchor

    def _composer_chunk_backward(self, context: StepContext, leaf: torch.Tensor,
                                 tasks: slice, n_tasks: int) -> float:
        """Backward of the tasks ``tasks``: ``(c * dL/dc).sum() + w * anchor * share``, where
        ``share`` is the chunk's part of the mean over the step's ``n_tasks`` tasks."""
        from lopd.losses import latent_anchor

        prompts, texts = context.task_prompts[tasks], context.texts[tasks]
        if self.config.optim.composer_recompute:  # composed without a graph: build it now
            latent, _ = self.composer.compose(prompts, texts)
        else:
            latent = context.task_latent[tasks]
        with torch.no_grad():
            reference, _ = self.anchor_composer.compose(prompts, texts)
        width = leaf.shape[1]  # a chunk's J may be smaller than the step's: pad its slots
        latent, reference = _pad_slots(latent, width), _pad_slots(reference, width)
        share = latent.shape[0] / n_tasks
        anchor = latent_anchor(latent, reference, self.config.method.anchor_reduction) * share
        objective = self.config.method.anchor_weight * anchor
        if leaf.grad is not None:
            objective = objective + (latent * leaf.grad[tasks].to(latent.dtype)).sum()
        if objective.requires_grad:  # False when no task retrieved anything (empty context)
            objective.backward()
        return float(anchor.detach())

    def optimizer_step(self) -> None:
        if not self.sharded:  # FSDP reduce-scatters the student's gradients itself
            distributed.sync_gradients(self.student_parameters())
        if self.composer_opt is not None:
            distributed.sync_gradients(self.composer.trainable_parameters())
        clip = self.config.optim.grad_clip
        if clip:
            torch.nn.utils.clip_grad_norm_(self.student_parameters(), clip)
        self.student_opt.step()
        if self.composer_opt is not None:
            if clip:
                torch.nn.utils.clip_grad_norm_(self.composer.trainable_parameters(), clip)
            self.composer_opt.step()

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self) -> dict:
        from lopd.evaluate import evaluate_tasks, summarize
        from lopd.rollout import RolloutConfig

        cfg = self.config
        backend = self.backend()
        rollout = RolloutConfig(max_steps=cfg.rollout.max_steps,
                                max_new_tokens=cfg.rollout.eval_tokens,
                                max_context_tokens=cfg.rollout.max_context_tokens, temperature=0.0)
        trajs = evaluate_tasks(backend, self.renderer, self.eval_tasks, rollout,
                               batch_size=cfg.data.eval_batch, seed=cfg.run.seed)
        return summarize(trajs)

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self, step: int, rollouts: int, beta: float, beta_history: list[float]) -> Path:
        def student(path: Path) -> None:
            if self.config.model.student == "full":
                self.model.save_pretrained(path)
            else:
                self.model.save_pretrained(path, selected_adapters=[STUDENT])
            self.tokenizer.save_pretrained(path)

        def optim(path: Path) -> None:
            torch.save({"student": None if self.sharded else self.student_opt.state_dict(),
                        "composer": self.composer_opt.state_dict() if self.composer_opt else None},
                       path)

        state = {"step": step, "rollouts": rollouts, "beta": beta, "beta_history": beta_history}
        parts = {
            "student": student,
            "optim.pt": optim,
            "state.json": lambda p: p.write_text(json.dumps(state)),
            "rng.pt": lambda p: torch.save(rng_state(), p),
            "config.yaml": lambda p: save_config(self.config, p),
        }
        if self.composer is not None:
            parts["composer"] = lambda p: self.composer.save(p)
        shared = []
        if self.sharded:  # every process writes its shards of the student and its optimiser
            from lopd.fsdp import save_student

            del parts["student"]
            shared.append(lambda folder: save_student(self.model, self.student_opt, folder))
        return save_checkpoint(self.out, step, parts, keep=self.config.run.keep_checkpoints,
                               shared=shared)

    def restore(self) -> tuple[int, int, float, list[float]]:
        """Load the newest intact checkpoint (a damaged one is reported in one line and the
        one before it is used); the bank and the skills forget rows added after it."""
        from lopd.checkpoint import all_checkpoints, checkpoint_problem
        from lopd.run_dir import notice, one_line, unreadable_errors

        for checkpoint in reversed(all_checkpoints(self.out)):
            problem = checkpoint_problem(checkpoint)
            if problem is None:
                try:
                    state = self._load_checkpoint(checkpoint)
                    break
                except unreadable_errors() as error:  # fall back to an older one
                    problem = f"unreadable ({one_line(error)})"
            notice(f"checkpoint {checkpoint} is {problem}: skipping it")
        else:
            raise FileNotFoundError(
                f"--resume: no usable checkpoint under {self.out}/checkpoints; "
                "start the run again without --resume")
        if self.bank is not None:
            self.bank.rollback_to_step(state["step"] - 1)
            self.retriever.sync()
        if self.skills is not None:
            self.skills.rollback(state["step"] - 1)
        self._trim_metrics(state["step"])
        return state["step"], state["rollouts"], state["beta"], state["beta_history"]

    def _load_checkpoint(self, checkpoint: Path) -> dict:
        """Student, composer, optimisers and RNG streams from ``checkpoint``; its state.json."""
        state = json.loads((checkpoint / "state.json").read_text())
        if self.sharded:
            from lopd.fsdp import load_student

            load_student(self.model, self.student_opt, checkpoint)
        else:
            self._load_student(checkpoint / "student")
        if self.composer is not None:
            self.composer.load(checkpoint / "composer")
        optim = torch.load(checkpoint / "optim.pt", weights_only=False, map_location="cpu")
        if not self.sharded:
            self.student_opt.load_state_dict(optim["student"])
        if self.composer_opt is not None and optim["composer"] is not None:
            self.composer_opt.load_state_dict(optim["composer"])
        set_rng_state(torch.load(checkpoint / "rng.pt", weights_only=False))
        return state

    def _trim_metrics(self, step: int) -> None:
        from lopd.run_dir import trim_metrics

        trim_metrics(self.out / "metrics.jsonl", step)

    def _load_student(self, directory: Path) -> None:
        if self.config.model.student == "full":
            from safetensors.torch import load_file

            state = {}
            shards = sorted(directory.glob("*.safetensors"))
            if not shards:
                raise FileNotFoundError(f"no *.safetensors under {directory}")
            for shard in shards:
                state.update(load_file(shard))
            self.model.load_state_dict(state, strict=False)
            return
        load_adapter_weights(self.model, directory, STUDENT)

    def settle_modes(self) -> None:
        """Eval mode for every module outside the training forwards (which switch to train mode
        themselves, ``checkpointing``). Modes decide kernel paths (e.g. attention): a run that
        skipped the cold start (resumed, or phi_0 already there) must compute exactly like one
        that ran it, which leaves the composer in eval mode."""
        for module in (self.model, self.teacher_model, self.composer, self.anchor_composer):
            if module is not None:
                module.eval()

    def tensorboard(self, out: Path):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(out / "tensorboard"))


def _pad_slots(latent: torch.Tensor, width: int) -> torch.Tensor:
    """``latent (n, C, d)`` with zero slots appended up to ``C = width`` (empty slots are zero)."""
    missing = width - latent.shape[1]
    return torch.nn.functional.pad(latent, (0, 0, 0, missing)) if missing > 0 else latent


def experience_text_message(experiences: list[str]) -> dict:
    """The user message that carries retrieved experiences as text (``method.context=text``)."""
    body = "\n\n".join(experiences)
    return {"role": "user",
            "content": f"Privileged information:\nExperience from related tasks:\n{body}"}


def load_adapter_weights(model, directory: Path, adapter_name: str) -> None:
    """Load a saved PEFT adapter's weights into an existing adapter of ``model``."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(str(Path(directory) / "adapter_model.safetensors"))
    set_peft_model_state_dict(model, weights, adapter_name=adapter_name)


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
