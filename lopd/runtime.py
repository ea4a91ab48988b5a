"""Everything a training run holds: model + student adapter, teacher, composer, bank, retriever,
optimisers, rollout backend; and how they are saved and restored.

The trainer (``lopd.trainer``) keeps the algorithm; this module keeps the objects. One base
model is shared: the student is its ``default`` LoRA adapter, the composer's encoder its
``composer`` adapter, the anchor composer phi_0 a frozen ``composer_anchor`` adapter, and the
teacher is the base with adapters disabled. With ``model.student=full`` the student is the
whole model and the teacher a separate frozen copy.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lopd import distributed
from lopd.atomic import write_text
from lopd.checkpoint import rng_state, save_checkpoint, set_rng_state
from lopd.config import Config, ConfigError, save_config
from lopd.contexts import LatentContextProvider, StepContext, text_context
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

    def backend(self):
        """The HF generation backend over the current student weights."""
        from lopd.generation import HFBackend

        return HFBackend(self.model, self.renderer.stop_ids, self.pad_id,
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
        envs, groups = make_group_envs(tasks, cfg.optim.group_size, make_env,
                                       cfg.rollout.max_steps, seed=step)
        self.model.eval()
        return run_episodes(envs, self.backend(), self.renderer, cfg.rollout,
                            seed=cfg.run.seed * 1_000_003 + step, groups=groups)

    def update_bank(self, trajs: list[Trajectory], step: int) -> None:
        """Successful rollouts join the experience bank (LOPD) and feed the skill library."""
        from lopd.experience.condense import experience_from_trajectory

        wins = [t for t in trajs if t.success]
        if self.retriever is not None:
            if wins:
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
        """Push the accumulated context gradient (and the anchor) through the composer."""
        from lopd.losses import latent_anchor

        if self.composer_opt is None or leaf.grad is None and not self.config.method.anchor_weight:
            return 0.0
        latent = context.task_latent
        if self.config.optim.composer_recompute:  # composed without a graph: build it now
            latent, _ = self.composer.compose(context.task_prompts, context.texts)
        with torch.no_grad():
            reference, _ = self.anchor_composer.compose(context.task_prompts, context.texts)
        anchor = latent_anchor(latent, reference, self.config.method.anchor_reduction)
        objective = self.config.method.anchor_weight * anchor
        if leaf.grad is not None:
            objective = objective + (latent * leaf.grad).sum()
        if objective.requires_grad:  # False when no task retrieved anything (empty context)
            objective.backward()
        return float(anchor.detach())

    def optimizer_step(self) -> None:
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
                                max_new_tokens=cfg.rollout.max_new_tokens,
                                max_context_tokens=cfg.rollout.max_context_tokens, temperature=0.0)
        trajs = evaluate_tasks(backend, self.renderer, self.eval_tasks, rollout,
                               batch_size=32, seed=cfg.run.seed)
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
            torch.save({"student": self.student_opt.state_dict(),
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
        return save_checkpoint(self.out, step, parts, keep=self.config.run.keep_checkpoints)

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
        self._load_student(checkpoint / "student")
        if self.composer is not None:
            self.composer.load(checkpoint / "composer")
        optim = torch.load(checkpoint / "optim.pt", weights_only=False, map_location="cpu")
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
                  deterministic=config.run.deterministic)
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
    from lopd.envs import check_references, load_suite
    from lopd.framing import LatentPlacement

    model, tokenizer, teacher = _build_model(config)
    train_tasks = load_suite(config.data.train_suite, n=config.data.max_train_tasks or None)
    check_references(config.method.name, train_tasks, config.data.train_suite)
    eval_tasks = load_suite(config.data.eval_suite, n=config.data.eval_tasks or None)
    rt = Runtime(config, out, model, tokenizer, ChatRenderer(tokenizer), train_tasks, eval_tasks,
                 teacher_model=teacher,
                 placement=LatentPlacement.build(config.method.latent_placement, tokenizer))
    method = config.method.name
    if method == "lopd":
        _attach_latent(rt)
    elif method == "sdft":
        _attach_demos(rt)
    elif method == "skill-sd":
        from lopd.skills import SkillLibrary

        rt.skills = SkillLibrary(out / "skills.sqlite", rt, config.method.num_experiences)
    params = rt.student_parameters()
    rt.student_opt = torch.optim.AdamW(params, lr=config.optim.student_lr,
                                       weight_decay=config.optim.weight_decay)
    return rt


def _attach_demos(rt: Runtime) -> None:
    from lopd.experience.condense import condense_trajectory
    from lopd.reference import reference_trajectory

    for task in rt.train_tasks:
        if task.reference:
            traj = reference_trajectory(task, rt.renderer, rt.config.rollout.max_steps)
            rt.demos[task.id] = condense_trajectory(traj.messages, task.prompt)


def _attach_latent(rt: Runtime) -> None:
    """Composer phi (trainable), anchor phi_0 (frozen), bank + retriever."""
    from lopd.composer import Composer, ComposerConfig
    from lopd.experience.bank import ExperienceBank, bank_path
    from lopd.experience.retriever import Embedder, Retriever
    from lopd.experience.transcripts import TranscriptStore
    from lopd.models import LoraSpec

    cfg = rt.config.method
    spec = LoraSpec(r=cfg.composer_lora_r, alpha=2 * cfg.composer_lora_r)
    composer_cfg = ComposerConfig(num_queries=cfg.latent_tokens, n_layers=cfg.composer_layers,
                                  lora=spec, block=cfg.compressor, latent_scale=cfg.latent_scale,
                                  max_pair_tokens=cfg.encoder_max_tokens)
    # The encoder lives on the frozen backbone: the student's own base (LoRA student) or the
    # frozen teacher copy (full fine-tuning), never on trainable student weights.
    backbone = rt.model if rt.teacher_model is None else rt.teacher_model
    rt.composer = Composer(backbone, rt.tokenizer, composer_cfg)
    rt.anchor_composer = Composer(rt.composer.model, rt.tokenizer, dataclasses.replace(
        composer_cfg, adapter_name="composer_anchor"))
    if rt.teacher_model is not None:
        rt.teacher_model = rt.composer.model  # the wrapped copy, so adapters can be disabled
    rt.bank = ExperienceBank(bank_path(rt.out))
    rt.retriever = Retriever(rt.bank, Embedder())
    rt.transcripts = TranscriptStore(bank_path(rt.out))
    rt.provider = LatentContextProvider(
        rt.composer, rt.retriever, cfg.num_experiences, cfg.experience_chars,
        transcripts=rt.transcripts if cfg.encoder_input == "full" else None,
        allow_self=cfg.allow_self_retrieval)
    phi0 = rt.out / "composer_phi0"
    if distributed.is_main():  # seed + cold start once; the other processes load the result
        if rt.bank.count() == 0 and cfg.bank_file:
            seed_bank_from_file(rt, cfg.bank_file, cfg.bank_min_reward)
        elif rt.bank.count() == 0 and cfg.seed_experiences:
            seed_bank(rt, cfg.seed_experiences)
        if not (phi0 / "composer.safetensors").exists():  # lopd.run_dir.repair removed a damaged one
            run_cold_start(rt, phi0)
    distributed.barrier()
    rt.retriever.sync()
    rt.composer.load(phi0)
    rt.anchor_composer.load(phi0).requires_grad_(False)
    if cfg.freeze_composer:  # ablation: phi stays phi_0
        rt.composer.requires_grad_(False)
    else:
        rt.composer_opt = torch.optim.AdamW(rt.composer.trainable_parameters(),
                                            lr=rt.config.optim.composer_lr,
                                            weight_decay=rt.config.optim.weight_decay)


def seed_bank(rt: Runtime, count: int) -> int:
    """Seed experiences: reference solutions of the first ``count`` training tasks."""
    from lopd.experience.condense import experience_from_trajectory
    from lopd.reference import reference_trajectory

    trajs = [reference_trajectory(t, rt.renderer, rt.config.rollout.max_steps)
             for t in rt.train_tasks[:count] if t.reference]
    wins = [t for t in trajs if t.success]
    return add_experiences(rt, [experience_from_trajectory(t, step=0, source="seed")
                                for t in wins], [t.messages for t in wins])


def seed_bank_from_file(rt: Runtime, path: str, min_reward: float) -> int:
    """Seed experiences from a JSONL file of trajectories (``method.bank_file``)."""
    from lopd.experience.bank_file import read_bank_file

    rows = read_bank_file(path, min_reward)
    if not rows:
        raise ConfigError(f"method.bank_file: no row of {path} has reward >= {min_reward}")
    return add_experiences(rt, [r.experience for r in rows], [r.messages for r in rows])


def add_experiences(rt: Runtime, experiences: list, transcripts: list) -> int:
    """Add rows to the bank (and the retriever) with their full transcripts."""
    if rt.transcripts is not None:
        rt.transcripts.put((e.task_id, e.trace_sha256, m)
                           for e, m in zip(experiences, transcripts))
    return len(rt.retriever.add(experiences))


def run_cold_start(rt: Runtime, phi0: Path) -> dict:
    """Cold start (paper §3.2): fit the composer on the bank's seed successes -> phi_0.

    Each example is a seed task's reference trajectory with context composed from OTHER
    retrieved experiences; a held-out fifth of the examples measures the teacher NLL with and
    without latent context. The numbers go to ``RUN/coldstart.json``.
    """
    from lopd.coldstart import cold_start, evaluate_nll

    cfg = rt.config.method
    examples = cold_start_examples(rt)
    report: dict = {"examples": len(examples)}
    if len(examples) >= 5 and cfg.cold_start_steps:
        held = examples[: held_out_count(len(examples))]
        fit = examples[len(held):]
        with rt.checkpointing():
            result = cold_start(rt.composer, rt.model, rt.tokenizer, fit, cfg.cold_start_steps,
                                lr=cfg.cold_start_lr, batch_size=cfg.cold_start_batch,
                                grad_clip=cfg.cold_start_clip,
                                weight_decay=rt.config.optim.weight_decay,
                                seed=rt.config.run.seed, teacher_model=rt.teacher_model,
                                evaluate=False, dtype=rt.dtype, placement=rt.placement)
        report.update(
            train_losses=result.losses,
            heldout_nll_no_context=evaluate_nll(rt.composer, rt.model, held, False, 4,
                                                rt.teacher_model, rt.dtype, rt.placement),
            heldout_nll_context=evaluate_nll(rt.composer, rt.model, held, True, 4,
                                             rt.teacher_model, rt.dtype, rt.placement))
    # the report first, then phi_0 (each atomic): a complete phi_0 implies its report
    write_text(rt.out / "coldstart.json", json.dumps(report, indent=2))
    rt.composer.save(phi0)
    return report


def held_out_count(n_examples: int) -> int:
    """The cold start holds out the first fifth of its examples to measure teacher NLL."""
    return max(1, n_examples // 5)


def cold_start_examples(rt: Runtime) -> list:
    """The cold start's examples: each bank row's task, its reference trajectory, and the
    traces of OTHER retrieved experiences (the bank holds the seed rows at that point)."""
    from lopd.coldstart import ColdStartExample
    from lopd.reference import reference_trajectory

    cfg = rt.config.method
    rows = rt.bank.all(with_embeddings=False)
    by_id = {t.id: t for t in rt.train_tasks}
    tasks = [by_id[r.task_id] for r in rows if r.task_id in by_id]
    found = rt.retriever.retrieve([(t.id, t.prompt) for t in tasks], j=cfg.num_experiences)
    text = rt.provider.experience_text if rt.provider is not None else (
        lambda e: e.trace[:cfg.experience_chars])
    return [
        ColdStartExample(reference_trajectory(t, rt.renderer, rt.config.rollout.max_steps),
                         t.prompt, [text(e) for e in exps])
        for t, exps in zip(tasks, found) if exps
    ]
