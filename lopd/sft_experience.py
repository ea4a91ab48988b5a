"""Experience-conditioned warm-start rows for `lopd sft --experience-suite`: teach the warm start
to act on what other tasks' successes show.

LOPD's teacher is the student's initial policy with retrieved experience in its context
(DESIGN.md section 5). A 135M warm start fitted on reference solutions alone does not use that
context: on the business-rules suites, successes that show the task's own rule move its
decision no more than successes that show another organisation's rules
(``benchmarks/results/rules/README.md``). These rows supply the missing skill. Each is a
reference solution of an organisation-specific task (``toolworld-rules-icl``, organisations
that no other suite uses) with J condensed successes spliced after its prompt exactly as
``method.context=text`` splices them (``lopd.runtime.experience_text_message``), drawn as
LOPD's retriever would draw them (about half from the task's own organisation):

- ``same-rule``: J successes of the task's organisation that meet one of the task's rules
  (any of its successes for a rule-free task);
- ``mixed``: one success of its organisation and J - 1 of another organisation of the same
  domain (other rules on the same tools), shuffled.

The target is the task's reference, which follows its own organisation's rules, so the loss
rewards copying a prerequisite from same-organisation experience and ignoring another
organisation's. The rows' prompts never carry the rules, so nothing here can be learnt except
from the context; the experience-free rows of the plain suite keep the tool skills.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

KINDS = ("same-rule", "mixed")


@dataclass
class ExperienceRow:
    """One supervised row: a reference trajectory and the token ids of its context message."""

    traj: object
    context_ids: list[int]
    kind: str


@dataclass
class ExperiencePool:
    """Reference successes of an experience suite, by organisation, with their condensed text."""

    trajs: list
    texts: dict[str, list[tuple[str, frozenset, str]]] = field(default_factory=dict)
    """org -> [(task id, rules met, condensed trace)]."""
    by_domain: dict[str, list] = field(default_factory=dict)
    org_domain: dict[str, str] = field(default_factory=dict)


def build_pool(tasks, renderer, chars: int) -> ExperiencePool:
    """The successful reference trajectories of ``tasks`` (each needs ``metadata["org"]``) and
    their condensed traces cut to ``chars`` characters (``method.experience_chars``)."""
    from lopd.experience.condense import experience_from_trajectory
    from lopd.reference import reference_trajectory

    pool = ExperiencePool(trajs=[])
    for task in tasks:
        org = task.metadata.get("org")
        if org is None:
            raise ValueError(f"experience suite task {task.id!r} names no organisation "
                             "(metadata 'org'); use toolworld-rules-icl or tasks that do")
        traj = reference_trajectory(task, renderer)
        if not traj.success:
            continue
        trace = experience_from_trajectory(traj, step=0, source="seed").trace[:chars]
        pool.trajs.append(traj)
        pool.texts.setdefault(org, []).append((task.id, frozenset(task.metadata["rules"]), trace))
        pool.by_domain.setdefault(task.domain, []).append(traj)
        pool.org_domain[org] = task.domain
    if not pool.trajs:
        raise ValueError("no reference solution of the experience suite succeeds when replayed")
    return pool


def pick_experiences(pool: ExperiencePool, task, kind: str, j: int,
                     rng: random.Random) -> list[str]:
    """J condensed successes for ``task`` drawn as ``kind`` (module docstring); never the task's
    own."""
    org = task.metadata["org"]
    own = [row for row in pool.texts[org] if row[0] != task.id]
    if kind == "same-rule":
        rules = set(task.metadata["rules"])
        showing = [row for row in own if row[1] & rules] if rules else own
        chosen = rng.sample(showing, min(j, len(showing)))
        rest = [row for row in own if row not in chosen]
        chosen += rng.sample(rest, min(j - len(chosen), len(rest)))
        return [row[2] for row in chosen]
    if kind != "mixed":
        raise ValueError(f"unknown experience kind {kind!r} (one of {KINDS})")
    others = [row for key, rows in pool.texts.items() if key != org
              and pool.org_domain[key] == task.domain for row in rows]
    chosen = rng.sample(own, min(1, len(own))) + rng.sample(others, min(j - 1, len(others)))
    rng.shuffle(chosen)
    return [row[2] for row in chosen]


def draw_rows(pool: ExperiencePool, renderer, batch_size: int, j: int,
              rng: random.Random, mixed_batches: bool = False) -> list[ExperienceRow]:
    """A batch of experience rows: one domain's tasks (all domains with ``mixed_batches``),
    each with a context of a kind drawn uniformly from ``KINDS``."""
    from lopd.runtime import experience_text_message

    source = (pool.trajs if mixed_batches
              else pool.by_domain[rng.choice(sorted(pool.by_domain))])
    rows = []
    for traj in rng.sample(source, min(batch_size, len(source))):
        kind = rng.choice(KINDS)
        texts = pick_experiences(pool, traj.task, kind, j, rng)
        ids = renderer.render_message(experience_text_message(texts))[0]
        rows.append(ExperienceRow(traj, list(ids), kind))
    return rows


def experience_sft_loss(model, rows: list[ExperienceRow], pad_id: int) -> torch.Tensor:
    """Mean over rows of the per-row mean NLL of action tokens, each row's context message
    spliced after its prompt (``lopd.teacher.forward_aligned``, the student's own adapters)."""
    from lopd.batch import collate, gather_token_logprobs
    from lopd.models import model_device
    from lopd.teacher import forward_aligned, pad_context_ids

    device = model_device(model)
    batch = collate([row.traj for row in rows], pad_id).to(device)
    context, mask = pad_context_ids([row.context_ids for row in rows], pad_id, device)
    logits = forward_aligned(model, batch, context, mask, positions="supervised",
                             share_prefix=False)
    targets = batch.targets[batch.target_mask]
    owners = batch.target_mask.nonzero()[:, 0]
    nll = -gather_token_logprobs(logits, targets)
    per_row = torch.zeros(len(rows), device=nll.device).index_add(0, owners, nll)
    return (per_row / torch.bincount(owners, minlength=len(rows)).clamp(min=1)).mean()


def experience_backward(model, rows: list[ExperienceRow], pad_id: int, dtype: str = "auto") -> float:
    """Accumulate the gradient of ``experience_sft_loss(rows)`` one row at a time (a row with
    its context runs ~1,200 tokens: four at once peaked near 20 GB on a CPU); returns the loss."""
    from lopd.models import autocast_context, model_device

    total = 0.0
    for row in rows:
        with autocast_context(dtype, model_device(model)):
            loss = experience_sft_loss(model, [row], pad_id) / len(rows)
        loss.backward()
        total += float(loss.detach())
    return total
