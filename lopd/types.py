"""Plain data types shared by environments, the rollout engine, the bank and the trainer.

Kept free of heavy imports (no torch) so environments and the bank can use them cheaply.

Conventions
- A conversation is a list of ``Message`` dicts: ``{"role": "system"|"user"|"assistant"|"tool",
  "content": str}``.
- A tool schema is the OpenAI-style function dict ``{"name", "description", "parameters"}``
  where ``parameters`` is a JSON-schema object (``type: object``, ``properties``, ``required``).
- A ``Trajectory`` holds the exact token ids the student saw and sampled. ``action_mask[i] == 1``
  iff token ``i`` was sampled by the model (including its end-of-turn token); the model's
  distribution for token ``i`` comes from the logits at position ``i - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

Message = dict[str, str]
ToolSchema = dict[str, Any]


@dataclass
class Task:
    """One task: what the agent is asked, with the tools it may use and a reference solution.

    ``reference`` is privileged text (an oracle trace or solution) used only by the OPSD/SDFT
    baselines and by warm starts; the student never sees it.
    """

    id: str
    split: str  # "train" | "test" | "transfer" | an evaluation suite name
    domain: str
    prompt: str
    tools: list[ToolSchema] = field(default_factory=list)
    reference: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ResetResult:
    """First messages of an episode (system instructions + the user's task) and its tools."""

    messages: list[Message]
    tools: list[ToolSchema]


@dataclass
class StepResult:
    """What the environment answers to one assistant turn.

    ``observation`` holds the messages to append (tool results as ``role="tool"``, or the next
    ``role="user"`` turn); it is empty when the episode is done. ``reward`` is the episode's
    outcome reward in [0, 1] once ``done`` (0 before). ``info`` carries counters such as
    ``tool_calls``, ``errors`` and ``success``.
    """

    observation: list[Message]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Env(Protocol):
    """One episode of one task. Deterministic given the task and the seed."""

    task: Task

    def reset(self) -> ResetResult: ...

    def step(self, assistant_text: str) -> StepResult: ...


@dataclass
class Trajectory:
    """One student episode as exact token ids, with everything the losses and the bank need.

    - ``input_ids``: the whole conversation, prompt included, as the student saw it.
    - ``action_mask``: 1 on tokens the student sampled, 0 on prompts and observations.
    - ``turn_spans``: ``(start, end)`` token ranges of each assistant turn's sampled tokens.
    - ``prompt_len``: tokens of the initial prompt (system + first user message); privileged
      context is inserted at this position by the teacher.
    - ``messages``: the text transcript (for the bank, reports and text-context baselines).
    - ``sampled_logprobs``: the sampling engine's log-probability of each action token, in
      order, when the backend reports them (vLLM); empty otherwise.
    """

    task: Task
    input_ids: list[int]
    action_mask: list[int]
    turn_spans: list[tuple[int, int]]
    prompt_len: int
    messages: list[Message]
    reward: float = 0.0
    success: bool = False
    group: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    sampled_logprobs: list[float] = field(default_factory=list)

    @property
    def advantage_signal(self) -> float:
        """A(tau) = 2 r(tau) - 1 in [-1, 1] (paper eq. 12)."""
        return 2.0 * self.reward - 1.0
