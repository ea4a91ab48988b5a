"""The parts a method adds to a ``Runtime``: LOPD's composer, bank, retriever and cold start;
SDFT's demonstrations.

``attach_latent`` builds LOPD's side (composer phi and its frozen anchor phi_0 on the frozen
backbone, the experience bank, the retriever, the full-transcript store, the context provider),
seeds the bank (reference solutions, or ``method.bank_file``) and runs the composer cold start
once (``RUN/composer_phi0`` + ``RUN/coldstart.json``); other processes of a data-parallel run
load its result. ``lopd.runtime_build.build_runtime`` calls these; they live here so the runtime module
keeps to the objects and their save/restore.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from lopd import distributed
from lopd.atomic import write_text
from lopd.config import ConfigError
from lopd.contexts import LatentContextProvider
from lopd.runtime import Runtime


def attach_demos(rt: Runtime) -> None:
    from lopd.experience.condense import condense_trajectory
    from lopd.reference import reference_trajectory

    for task in rt.train_tasks:
        if task.reference:
            traj = reference_trajectory(task, rt.renderer, rt.config.rollout.max_steps)
            rt.demos[task.id] = condense_trajectory(traj.messages, task.prompt)


def attach_latent(rt: Runtime) -> None:
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
                                  max_pair_tokens=cfg.encoder_max_tokens,
                                  query_init_std=cfg.composer_query_std)
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
    return rt.add_experiences([experience_from_trajectory(t, step=0, source="seed")
                                for t in wins], [t.messages for t in wins])


def seed_bank_from_file(rt: Runtime, path: str, min_reward: float) -> int:
    """Seed experiences from a JSONL file of trajectories (``method.bank_file``)."""
    from lopd.experience.bank_file import read_bank_file

    rows = read_bank_file(path, min_reward)
    if not rows:
        raise ConfigError(f"method.bank_file: no row of {path} has reward >= {min_reward}")
    return rt.add_experiences([r.experience for r in rows], [r.messages for r in rows])


def run_cold_start(rt: Runtime, phi0: Path) -> dict:
    """Cold start (paper §3.2): fit the composer on the bank's seed successes -> phi_0.

    Each example is a seed task's reference trajectory with context composed from OTHER
    retrieved experiences; a held-out fifth of the examples measures the teacher NLL with and
    without latent context. The numbers go to ``RUN/coldstart.json``. Skipped (phi_0 = the
    initial composer) under ``method.context=text``, whose teacher never reads the latents.
    """
    from lopd.coldstart import cold_start, evaluate_nll, shuffled_examples

    cfg = rt.config.method
    if cfg.context == "text":  # the teacher reads the experiences as text and never phi
        examples, report = [], {"examples": 0, "skipped": "method.context=text"}
    else:
        examples = cold_start_examples(rt)
        report = {"examples": len(examples)}
    if len(examples) >= 5 and cfg.cold_start_steps:
        held = examples[: held_out_count(len(examples))]
        fit = examples[len(held):]
        with rt.checkpointing():
            result = cold_start(rt.composer, rt.model, rt.tokenizer, fit, cfg.cold_start_steps,
                                lr=cfg.cold_start_lr, batch_size=cfg.cold_start_batch,
                                grad_clip=cfg.cold_start_clip,
                                weight_decay=rt.config.optim.weight_decay,
                                seed=rt.config.run.seed, teacher_model=rt.teacher_model,
                                evaluate=False, dtype=rt.dtype, placement=rt.placement,
                                contrast=cfg.cold_start_contrast,
                                contrast_margin=cfg.cold_start_contrast_margin)
        report.update(
            train_losses=result.losses,
            heldout_nll_no_context=evaluate_nll(rt.composer, rt.model, held, False, 4,
                                                rt.teacher_model, rt.dtype, rt.placement),
            heldout_nll_context=evaluate_nll(rt.composer, rt.model, held, True, 4,
                                             rt.teacher_model, rt.dtype, rt.placement),
            heldout_nll_shuffled_context=evaluate_nll(rt.composer, rt.model,
                                                      shuffled_examples(held), True, 4,
                                                      rt.teacher_model, rt.dtype, rt.placement),
            latent_diversity=composer_diversity(rt.composer, held))
    # the report first, then phi_0 (each atomic): a complete phi_0 implies its report
    write_text(rt.out / "coldstart.json", json.dumps(report, indent=2))
    rt.composer.save(phi0)
    return report


@torch.no_grad()
def composer_diversity(composer, examples: list, limit: int = 16) -> dict[str, float]:
    """``lopd.composer.latent_diversity`` of the pairs of up to ``limit`` examples."""
    from lopd.composer import latent_diversity

    picked = examples[:limit]
    out = composer.compose_detailed([e.task_text for e in picked],
                                    [list(e.experiences) for e in picked])
    n_tasks, width, d = out.context.shape
    K = composer.config.num_queries
    grid = out.context.reshape(n_tasks, width // K, K, d)
    return latent_diversity(grid[out.pair_task, out.pair_slot])


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
