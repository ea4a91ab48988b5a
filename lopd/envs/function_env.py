"""A stateful tool environment built from the user's own class (or plain functions).

The pattern is ToolWorld's, without writing schemas by hand:

- a ``ToolService`` subclass holds a JSON-able ``self.state``; its public methods are the tools
  (typed and docstringed: ``lopd.tools`` derives their schemas); helpers start with ``_``;
- a task (``tool_task``) names the tool set by import path and carries the initial state, a
  checklist of declarative checks on the final state, and optionally a reference solution;
- the episode (``FunctionEnv``) runs ToolWorld's semantics: each ``<tool_call>`` block gets one
  ``role=tool`` message (at most ``max_calls`` per turn, ``lopd.envs.common``), a turn without
  any attempted call is the final answer, ``max_steps`` caps the turns. A call that fails (bad arguments, an exception, a result that is not JSON, a
  non-finite number) is an error observation and leaves the state as it was before the call.

Checks are ToolWorld's (``lopd.envs.toolworld.base.Check``: ``eq``, ``missing``, ``unchanged``,
``same_except``, ``kept_except``, ``match``, ``no_match``, ``count``; a ``path`` into the state)
plus ``answer_contains`` (the final answer holds ``value``, case-insensitive). Guard checks
(``"guard": true``) earn credit only alongside a passing goal check. The episode's reward is the
share of checks passing (partial credit in [0, 1]); success means all of them pass.

A tool set may also be a list (or dict) of plain functions: stateless tools, whose tasks are
usually scored with ``answer_contains``.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from lopd.chat import format_tool_call, tool_system_prompt
from lopd.envs.common import MAX_CALLS_PER_TURN, answer_calls, read_turn
from lopd.envs.journal import Journal, track
from lopd.tools import ToolBox, ToolSchemaError
from lopd.types import Message, ResetResult, StepResult, Task, ToolSchema

STATE_OPS = ("eq", "missing", "unchanged", "same_except", "kept_except", "match", "no_match",
             "count")
ANSWER_OPS = ("answer_contains",)
INSTRUCTIONS = (
    "You operate {description} through its tools on behalf of the user. Do exactly what the "
    "user asks; look up ids and values with the tools rather than guessing them, and change "
    "nothing else."
)


class TaskSpecError(ValueError):
    """A task an environment cannot run (bad checks, unknown tool in its reference, ...)."""


class ToolService:
    """Base class of a stateful tool set (see the module docstring).

    Class attributes: ``description`` (what the agent operates, e.g. "a to-do list service"),
    ``instructions`` (the whole system instruction, overriding the default built from
    ``description``), ``example`` (``(tool name, arguments)`` shown as the example call).
    """

    description = "a service"
    instructions = ""
    example: tuple[str, dict[str, Any]] | None = None

    def __init__(self, state: dict[str, Any] | None = None):
        self.state = copy.deepcopy(state or {})

    @classmethod
    def tool_names(cls) -> list[str]:
        """Public methods defined by the subclasses, in source order."""
        found = {}
        for klass in reversed(cls.__mro__):
            if klass in (object, ToolService) or not issubclass(klass, ToolService):
                continue
            for name, member in vars(klass).items():
                if not name.startswith("_") and inspect.isfunction(member):
                    found[name] = member.__code__.co_firstlineno
        return list(found)


def toolbox_for(toolset: Any, state: dict[str, Any] | None = None) -> tuple[ToolBox, Any]:
    """(tool box, service instance or None) of a ``ToolService`` subclass or plain functions."""
    if isinstance(toolset, type) and issubclass(toolset, ToolService):
        service = toolset(state)
        names = toolset.tool_names()
        if not names:
            raise ToolSchemaError(f"{toolset.__name__} defines no public method to use as a tool")
        return ToolBox({name: getattr(service, name) for name in names}), service
    if isinstance(toolset, (dict, list, tuple)):
        return ToolBox(toolset), None
    if callable(toolset) and not isinstance(toolset, type):
        return ToolBox([toolset]), None
    raise ToolSchemaError(f"a tool set must be a ToolService subclass or a list/dict of "
                          f"functions, got {type(toolset).__name__}")


def normalise_checks(checks: Any, where: str) -> list[dict[str, Any]]:
    """Checks as plain dicts ``{name, description, op, path, value, guard}``; raises
    ``TaskSpecError`` naming ``where`` when one is malformed."""
    if not isinstance(checks, list) or not checks:
        raise TaskSpecError(f"{where}: 'checks' must be a non-empty list of checks")
    out = []
    for index, check in enumerate(checks):
        if not isinstance(check, dict):
            raise TaskSpecError(f"{where}: check {index} must be an object, got "
                                f"{type(check).__name__}")
        op = check.get("op")
        if op not in STATE_OPS + ANSWER_OPS:
            raise TaskSpecError(f"{where}: check {index} has op {op!r}; use one of "
                                f"{', '.join(STATE_OPS + ANSWER_OPS)}")
        path = check.get("path", [])
        if op in STATE_OPS and (not isinstance(path, list) or not path):
            raise TaskSpecError(f"{where}: check {index} ({op}) needs a non-empty 'path' list")
        if op in ("answer_contains",) and not isinstance(check.get("value"), str):
            raise TaskSpecError(f"{where}: check {index} (answer_contains) needs a string value")
        name = str(check.get("name") or f"check_{index}")
        out.append({"name": name, "description": str(check.get("description") or name),
                    "op": op, "path": list(path), "value": check.get("value"),
                    "guard": bool(check.get("guard", False))})
    return out


def evaluate_checks(checks: list[dict[str, Any]], initial: dict, final: dict,
                    answer: str) -> list[bool]:
    """Per-check pass/fail on the final state and answer (guards as in ToolWorld)."""
    from lopd.envs.toolworld.base import Check, check_passes

    raw = []
    for spec in checks:
        if spec["op"] == "answer_contains":
            raw.append(str(spec["value"]).lower() in answer.lower())
        else:
            check = Check(spec["name"], spec["description"], spec["op"], tuple(spec["path"]),
                          spec["value"], spec["guard"])
            raw.append(check_passes(check, initial, final))
    any_goal = any(ok for ok, c in zip(raw, checks) if not c["guard"])
    return [ok and (any_goal or not c["guard"]) for ok, c in zip(raw, checks)]


def reference_text(reference: Any, tool_names: list[str] | None, where: str) -> str:
    """A reference solution as ``<tool_call>`` lines (``lopd.reference`` replays one per turn).

    ``reference`` is a list of ``{"name", "arguments"}`` calls (or ``[name, arguments]`` pairs),
    or text used as it is (already formatted calls, or a plain answer)."""
    if reference is None or reference == "":
        return ""
    if isinstance(reference, str):
        return reference
    if not isinstance(reference, list):
        raise TaskSpecError(f"{where}: 'reference' must be a list of calls or a string")
    lines = []
    for index, call in enumerate(reference):
        if isinstance(call, dict):
            name, arguments = call.get("name"), call.get("arguments", {})
        elif isinstance(call, (list, tuple)) and len(call) == 2:
            name, arguments = call
        else:
            raise TaskSpecError(f"{where}: reference call {index} must be "
                                '{"name": ..., "arguments": {...}}')
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise TaskSpecError(f"{where}: reference call {index} needs a string name and an "
                                "arguments object")
        if tool_names is not None and name not in tool_names:
            raise TaskSpecError(f"{where}: reference call {index} uses unknown tool {name!r} "
                                f"(tools: {', '.join(tool_names)})")
        lines.append(format_tool_call(name, arguments))
    return "\n".join(lines)


def tool_task(task_id: str, prompt: str, toolset: str, *, state: dict | None = None,
              checks: list[dict], reference: Any = None, split: str = "train",
              domain: str = "", tools: list[str] | None = None,
              metadata: dict | None = None, toolset_object: Any = None) -> Task:
    """A ``Task`` for ``FunctionEnv``. ``toolset`` is the import path of the tool set
    (``module:attr`` or ``file.py:attr``); ``toolset_object`` (the imported object, when the
    caller has it) lets the schemas and the reference be checked now."""
    where = f"task {task_id!r}"
    checks = normalise_checks(checks, where)
    box = None
    if toolset_object is not None:
        box, _ = toolbox_for(toolset_object, state)
    names = list(box.schemas) if box is not None else None
    if tools is not None and names is not None:
        unknown = [t for t in tools if t not in names]
        if unknown:
            raise TaskSpecError(f"{where}: unknown tools {unknown} (tools: {', '.join(names)})")
    schemas = [] if box is None else [s for n, s in box.schemas.items()
                                      if tools is None or n in tools]
    meta = {**(metadata or {}), "env": "function", "toolset": toolset, "state": state or {},
            "checks": checks}
    if tools is not None:
        meta["allowed_tools"] = list(tools)
    return Task(id=task_id, split=split, domain=domain or toolset.rsplit(":", 1)[-1],
                prompt=prompt, tools=copy.deepcopy(schemas),
                reference=reference_text(reference, tools or names, where), metadata=meta)


class FunctionEnv:
    """One episode of a ``tool_task`` (see the module docstring)."""

    def __init__(self, task: Task, toolset: Any, seed: int = 0, max_steps: int = 30,
                 max_calls: int = MAX_CALLS_PER_TURN):
        self.task = task
        self.seed = seed  # the episode is determined by the task; kept for the protocol
        self.max_steps = max_steps
        self.max_calls = max_calls
        self.toolset = toolset
        self.initial = copy.deepcopy(task.metadata.get("state") or {})
        self.checks = normalise_checks(task.metadata.get("checks"), f"task {task.id!r}")
        self.box, self.service = self._build()
        allowed = task.metadata.get("allowed_tools")
        self.tools: list[ToolSchema] = [copy.deepcopy(s) for n, s in self.box.schemas.items()
                                        if allowed is None or n in allowed]
        self.steps = self.tool_calls = self.errors = 0
        self.answer = ""
        self.done = False

    def system_prompt(self) -> str:
        owner = self.toolset if isinstance(self.toolset, type) else ToolService
        instructions = owner.instructions or INSTRUCTIONS.format(description=owner.description)
        example = format_tool_call(*owner.example) if owner.example else None
        return tool_system_prompt(instructions, self.tools, example)

    def reset(self) -> ResetResult:
        self.box, self.service = self._build()
        self.steps = self.tool_calls = self.errors = 0
        self.answer = ""
        self.done = False
        messages: list[Message] = [{"role": "system", "content": self.system_prompt()},
                                   {"role": "user", "content": self.task.prompt}]
        return ResetResult(messages=messages, tools=copy.deepcopy(self.tools))

    def _build(self) -> tuple[ToolBox, Any]:
        """A fresh tool box; the service's state is journaled (``lopd.envs.journal``)."""
        box, service = toolbox_for(self.toolset, self.initial)
        self.journal = Journal()
        if service is not None:
            service.state = track(service.state, self.journal)
        return box, service

    def _run(self, name: str, arguments: dict[str, Any]) -> Any:
        """One call; a failed call (or one that writes a non-finite number) is undone, without
        copying the state: the journal records what the call changes."""
        if self.service is None:
            return self.box.call(name, arguments)
        root = self.service.state = self.journal.adopt(self.service.state)
        self.journal.begin()
        result = self.box.call(name, arguments)
        failed = isinstance(result, dict) and set(result) == {"error"}
        if not failed and self._wrote_non_finite(root):
            result, failed = {"error": f"{name}: rejected, it would put a non-finite number "
                                       "in the state"}, True
        if failed:
            self.journal.undo()
            self.service.state = root
        return result

    def _wrote_non_finite(self, root: Any) -> bool:
        from lopd.envs.toolworld.base import non_finite_paths

        if self.service.state is root:
            return bool(self.journal.commit())
        if non_finite_paths(self.service.state):  # the tool replaced the whole state
            return True
        self.journal.commit()
        self.service.state = track(self.service.state, self.journal)
        return False

    def step(self, assistant_text: str) -> StepResult:
        if self.done:
            return StepResult([], 0.0, True, self._info(final=True))
        self.steps += 1
        turn = read_turn(assistant_text, self.tools, self.max_calls)
        observation, calls, errors = answer_calls(turn, self._run)
        self.tool_calls += calls
        self.errors += errors
        if turn.items and self.steps < self.max_steps:
            return StepResult(observation, 0.0, False, self._info(final=False))
        self.done = True
        self.answer = "" if turn.items else turn.content
        info = self._info(final=True)
        info["truncated"] = bool(turn.items)
        return StepResult([], info["reward"], True, info)

    def score(self) -> tuple[float, list[bool]]:
        final = self.service.state if self.service is not None else {}
        passed = evaluate_checks(self.checks, self.initial, final, self.answer)
        return sum(passed) / len(passed), passed

    def _info(self, final: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"tool_calls": self.tool_calls, "errors": self.errors,
                                "steps": self.steps}
        if final:
            reward, passed = self.score()
            info.update(reward=reward, success=all(passed), checks=passed)
        return info


def function_env_maker(toolset: Any) -> Callable[..., FunctionEnv]:
    """An env maker ``(task, seed, max_steps, max_calls) -> FunctionEnv`` bound to one tool set."""

    def make(task: Task, seed: int = 0, max_steps: int = 30,
             max_calls: int = MAX_CALLS_PER_TURN) -> FunctionEnv:
        return FunctionEnv(task, toolset, seed=seed, max_steps=max_steps, max_calls=max_calls)

    return make


__all__ = ["FunctionEnv", "TaskSpecError", "ToolService", "evaluate_checks", "function_env_maker",
           "normalise_checks", "reference_text", "tool_task", "toolbox_for"]
