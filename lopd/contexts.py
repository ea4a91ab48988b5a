"""Privileged-context providers: what each method shows its teacher (DESIGN.md §2).

Every method shares the rollouts, masks and teacher; they differ only here and in the
divergence (``lopd.methods``). A provider turns one step's trajectories into a ``StepContext``:

- ``latent`` (LOPD): J retrieved experiences per task, composed into J*K latent vectors once per
  task and shared by the task's rollouts (``Composer`` + ``Retriever``).
- text (baselines), inserted at the same point as a user message:
  - SDFT: a demonstration — the task's reference trajectory, condensed (``reference``);
  - OPSD: the oracle answer — the task's reference solution verbatim;
  - SDPO: a successful sibling rollout of the same group (never the rollout itself), condensed,
    plus the environment's feedback on this rollout; a rollout without a successful sibling
    gives no signal (as in SDPO);
  - Skill-SD: skills the model itself summarised from successful trajectories, kept in a
    library (its own SQLite bank) and retrieved by task similarity.

Simplifications: SDPO's feedback is the outcome (reward, tool errors) rather than free-form
critique; Skill-SD summarises each successful task once with a greedy 48-token generation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lopd.chat import ChatRenderer
from lopd.experience.condense import condense_trajectory
from lopd.types import Trajectory


@dataclass
class StepContext:
    """Privileged context for one step's trajectories (B rows).

    task_latent  (n_tasks, C, d) composed latent context per task, or None
    task_mask    (n_tasks, C) bool, real latent slots
    row_task     (B,) long: the task (row of task_latent) of every trajectory
    text_ids     per-row token ids of a text block, or None
    active       (B,) bool: rows that receive a distillation signal
    texts        the experience texts each task saw (for logs and the inspector)
    task_prompts the prompt of each task (row of task_latent)
    """

    active: torch.Tensor
    task_latent: torch.Tensor | None = None
    task_mask: torch.Tensor | None = None
    row_task: torch.Tensor | None = None
    text_ids: list[list[int]] | None = None
    texts: list[list[str]] = field(default_factory=list)
    task_prompts: list[str] = field(default_factory=list)


def _as_user_block(renderer: ChatRenderer, title: str, body: str) -> list[int]:
    ids, _ = renderer.render_message({"role": "user", "content": f"{title}\n{body}"})
    return ids


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + " ..."


def text_context(method: str, trajs: Sequence[Trajectory], renderer: ChatRenderer,
                 chars: int, demos: dict[str, str] | None = None,
                 skills: list[list[str]] | None = None) -> StepContext:
    """Text blocks for sdft / opsd / sdpo / skill-sd (see the module docstring)."""
    blocks: list[str | None] = []
    for row, traj in enumerate(trajs):
        if method == "opsd":
            blocks.append(f"The reference solution:\n{traj.task.reference}" if traj.task.reference else None)
        elif method == "sdft":
            demo = (demos or {}).get(traj.task.id)
            blocks.append(f"A demonstration of this task:\n{demo}" if demo else None)
        elif method == "sdpo":
            blocks.append(_sibling_feedback(traj, trajs))
        elif method == "skill-sd":
            found = skills[row] if skills else []
            blocks.append("Useful skills:\n" + "\n".join(f"- {s}" for s in found) if found else None)
        else:
            raise ValueError(f"no text context for method {method!r}")
    text_ids = [_as_user_block(renderer, "Privileged information:", _clip(b, chars)) if b else []
                for b in blocks]
    active = torch.tensor([b is not None for b in blocks], dtype=torch.bool)
    return StepContext(active=active, text_ids=text_ids, texts=[[b] if b else [] for b in blocks])


def _sibling_feedback(traj: Trajectory, trajs: Sequence[Trajectory]) -> str | None:
    """A successful *sibling* of ``traj`` (same group, another rollout) plus feedback, or None.
    A rollout is never its own demonstration (the public SDPO code's default): a lone success
    in its group gets no signal."""
    siblings = [t for t in trajs if t.group == traj.group and t.success and t is not traj]
    if not siblings:
        return None
    best = max(siblings, key=lambda t: t.reward)
    trace = condense_trajectory(best.messages, best.task.prompt)
    feedback = (f"Feedback on your attempt: reward {traj.reward:.2f}, "
                f"{int(traj.stats.get('tool_errors', 0))} tool errors.")
    return f"A successful attempt at this task:\n{trace}\n{feedback}"


def latent_context_diversity(context: StepContext | None, num_queries: int) -> dict[str, float]:
    """``lopd.composer.latent_diversity`` of a step's composed contexts, as step metrics
    (``latent_cos_within``, ``latent_cos_across``); empty without latents. Both near 1: the
    composer has collapsed to one input-blind vector (``docs/methods.md``, the cold start)."""
    if context is None or context.task_latent is None or context.task_latent.numel() == 0:
        return {}
    from lopd.composer import latent_diversity

    n, width, d = context.task_latent.shape
    grid = context.task_latent.detach().reshape(n, width // num_queries, num_queries, d)
    present = context.task_mask.reshape(n, width // num_queries, num_queries)[..., 0]
    if not bool(present.any()):
        return {}
    found = latent_diversity(grid[present])
    return {f"latent_cos_{name}": value for name, value in found.items()
            if not math.isnan(value)}  # "across" needs two experiences


class LatentContextProvider:
    """LOPD: retrieve J experiences per task, compose J*K latent tokens, share per group.

    ``transcripts`` (a ``TranscriptStore``) switches the encoder's input to the full chat
    rendering of each retrieved trajectory (``method.encoder_input=full``); otherwise it reads
    the condensed trace cut to ``experience_chars``. ``allow_self`` lets a task retrieve its
    own rows (``method.allow_self_retrieval``).
    """

    def __init__(self, composer, retriever, num_experiences: int, experience_chars: int,
                 transcripts=None, allow_self: bool = False):
        self.composer = composer
        self.retriever = retriever
        self.j = num_experiences
        self.chars = experience_chars
        self.transcripts = transcripts
        self.allow_self = allow_self

    def experience_text(self, experience) -> str:
        """What the encoder reads of one retrieved row."""
        if self.transcripts is not None:
            from lopd.experience.transcripts import render_transcript

            messages = self.transcripts.get(experience.task_id, experience.trace_sha256)
            if messages:
                return render_transcript(self.composer.tokenizer, messages)
        return _clip(experience.trace, self.chars)

    def retrieve_texts(self, tasks, step: int | None) -> list[list[str]]:
        found = self.retriever.retrieve([(t.id, t.prompt) for t in tasks], j=self.j,
                                        max_step=step, exclude_same_task=not self.allow_self)
        return [[self.experience_text(e) for e in row] for row in found]

    def compose(self, tasks, texts: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.composer.compose([t.prompt for t in tasks], texts)

    def __call__(self, trajs: Sequence[Trajectory], step: int) -> StepContext:
        tasks, first_row = [], {}
        for traj in trajs:
            if traj.group not in first_row:
                first_row[traj.group] = len(tasks)
                tasks.append(traj.task)
        texts = self.retrieve_texts(tasks, step)
        task_latent, task_mask = self.compose(tasks, texts)
        index = [first_row[t.group] for t in trajs]
        active = torch.tensor([bool(texts[i]) for i in index], dtype=torch.bool)
        return StepContext(active=active, task_latent=task_latent, task_mask=task_mask,
                           row_task=torch.tensor(index, dtype=torch.long), texts=texts,
                           task_prompts=[t.prompt for t in tasks])
