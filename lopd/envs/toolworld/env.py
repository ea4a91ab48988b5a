"""ToolWorld episode: a stateful domain driven by the agent's tool calls, scored by checklist.

``reset()`` rebuilds the task's initial state from (domain, tier, seed) in ``task.metadata``
(generation is deterministic), so a ``Task`` stays a small JSON-able record. ``step(text)``
executes the turn's calls in order, one ``role=tool`` message per ``<tool_call>`` block (the
result, or ``{"error": ...}`` for a malformed call or an invalid operation), at most
``max_calls`` of them per turn (``lopd.envs.common`` caps a turn). A turn without any
attempted call is the final answer and ends the episode, as does the ``max_steps`` cap. The
reward is the fraction of checks passing on the final state (guards only alongside a passing
goal check, see ``base.evaluate``); success means every check passes.
"""

from __future__ import annotations

from typing import Any

from lopd.chat import format_tool_call, tool_system_prompt
from lopd.envs.common import MAX_CALLS_PER_TURN, answer_calls, read_turn
from lopd.envs.toolworld.base import Domain, TaskSpec, evaluate
from lopd.types import Message, ResetResult, StepResult, Task

INSTRUCTIONS = (
    "You are an assistant that operates {description} through tools. Carry out the user's "
    "request exactly, using the tools to look up anything you do not know (ids, balances, "
    "dates) instead of guessing. Change nothing the user did not ask for."
)


class ToolWorldEnv:
    """One episode of a ToolWorld task (see the module docstring)."""

    def __init__(self, task: Task, seed: int = 0, max_steps: int = 30,
                 max_calls: int = MAX_CALLS_PER_TURN):
        from lopd.envs.toolworld.suites import domain_class, spec_for

        self.task = task
        self.seed = seed  # the episode is fully determined by the task; kept for the protocol
        self.max_steps = max_steps
        self.max_calls = max_calls
        self.domain_cls: type[Domain] = domain_class(task)
        self.spec: TaskSpec = spec_for(task)
        self.tools = self.domain_cls.schemas()
        self.world: Domain | None = None
        self.steps = self.tool_calls = self.errors = 0
        self.done = False

    def system_prompt(self) -> str:
        name, args = self.domain_cls.example
        instructions = INSTRUCTIONS.format(description=self.domain_cls.description)
        return tool_system_prompt(instructions, self.tools, format_tool_call(name, args))

    def reset(self) -> ResetResult:
        self.world = self.domain_cls(self.spec.state)
        self.steps = self.tool_calls = self.errors = 0
        self.done = False
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt()},
            {"role": "user", "content": self.task.prompt},
        ]
        return ResetResult(messages=messages, tools=self.tools)

    def step(self, assistant_text: str) -> StepResult:
        if self.world is None:
            self.reset()
        if self.done:
            return StepResult([], 0.0, True, self._info(final=True))
        self.steps += 1
        turn = read_turn(assistant_text, self.tools, self.max_calls)
        observation, calls, errors = answer_calls(turn, self.world.call)
        self.tool_calls += calls
        self.errors += errors
        if turn.items and self.steps < self.max_steps:
            return StepResult(observation, 0.0, False, self._info(final=False))
        self.done = True
        info = self._info(final=True)
        info["truncated"] = bool(turn.items)
        return StepResult([], info["reward"], True, info)

    def score(self) -> tuple[float, list[bool]]:
        passed = evaluate(self.spec.checks, self.spec.state, self.world.state)
        return sum(passed) / len(passed), passed

    def _info(self, final: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"tool_calls": self.tool_calls, "errors": self.errors,
                                "steps": self.steps}
        if final:
            reward, passed = self.score()
            info.update(reward=reward, success=all(passed), checks=passed)
        return info
