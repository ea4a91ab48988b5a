"""Everything a training run holds: model + student adapter, teacher, composer, bank, retriever,
optimisers, rollout backend, and the phases the trainer runs on them.

The trainer (``lopd.trainer``) keeps the algorithm; this module keeps the objects. One base
model is shared: the student is its ``default`` LoRA adapter, the composer's encoder its
``composer`` adapter, the anchor composer phi_0 a frozen ``composer_anchor`` adapter, and the
teacher is the base with adapters disabled. With ``model.student=full`` the student is the
whole model and the teacher a separate frozen copy. A warm start (``model.init_adapter``) is
merged into the base before any of that, so "the base" is the initial policy. The parts each
method adds (LOPD's composer, bank and cold start; SDFT's demonstrations) are assembled in
``lopd.method_parts``.

The run's state is built, held and persisted by three modules, each below the trainer:
``lopd.runtime_build`` builds a ``Runtime`` from a config, this module holds it, and
``lopd.runtime_store`` saves it to checkpoints and restores it; the held-out evaluation of a
run is ``lopd.evaluate.evaluate_runtime``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from lopd import distributed
from lopd.config import Config
from lopd.contexts import StepContext, text_context
from lopd.models import STUDENT, model_device, resolve_dtype
from lopd.types import Trajectory


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
                self.add_experiences([experience_from_trajectory(t, step) for t in wins],
                                     [t.messages for t in wins])
            if distributed.world()[1] > 1:  # other processes' rows
                distributed.barrier()
                self.retriever.sync()
        if self.skills is not None and wins:
            self.skills.add_from(wins, step)

    def add_experiences(self, experiences: list, transcripts: list) -> int:
        """Store experiences (and their full transcripts, for ``encoder_input=full``); returns
        how many rows the bank added (rows it already holds are skipped)."""
        if self.transcripts is not None:
            self.transcripts.put((e.task_id, e.trace_sha256, m)
                                 for e, m in zip(experiences, transcripts))
        return len(self.retriever.add(experiences))

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
