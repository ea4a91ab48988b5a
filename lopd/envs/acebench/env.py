"""ACEBench agent tasks as lopd suites and episodes (``ACEBenchEnv``).

The data (``data/``, see its SOURCE.md) holds 20 multi-step and 30 multi-turn tasks. Each
names its scenario classes (``involved_classes``), their initial configuration and the tools
offered (``function``, ACEBench's schema dialect, turned into JSON schemas by ``to_schema``).

Episode semantics (ACEBench's, in lopd's ``Env`` protocol):

- one instance per involved class, loaded with the task's class entry and then its ``BaseApi``
  entry; a call runs the method of that name on every instance that has it (so
  ``turn_on_wifi`` switches Wi-Fi on every phone class) and answers with the first result;
  a Python error inside a method is answered "Error during execution: ..." and, as in
  ACEBench, whatever the method changed before it stays changed;
- only the offered tools can be called, with their own argument names (unknown names and keys
  are error observations and never reach a method); argument types and required arguments
  are not checked before the call, as ACEBench executes what the model wrote (a missing
  argument comes back as an execution error); at most ``max_calls`` calls per assistant turn
  (``lopd.envs.common``);
- multi-step: the task is the first user message; a turn without any tool call ends the
  episode (lopd's convention; ACEBench waits for "Task Completed" and answers other text with
  "do not ask me questions", which changes no state); multi-turn: the first message comes from
  the simulated user (``lopd.envs.acebench.user``), a turn without tool calls goes to the user,
  whose reply is the next observation, and the episode ends when the user says "finish
  conversation" (or after ``max_replies`` replies); both end at ``max_steps`` turns, and every
  ending is scored;
- score (``lopd.envs.acebench.scoring``): ``success`` is end-state accuracy (the headline),
  ``reward`` is ACEBench's process score (1.0 whenever the end state is right), so ``lopd eval``
  reports end-state accuracy as success and the process score as mean reward.

Differences from the published data, kept small and documented where they are made: the
schema of ``reserve_flight`` requires ``payment_methods`` but its argument is
``payment_method`` (the misspelt required name is read as the argument it names); several
milestone paths cannot reach their own expected state (``ORACLE_FIXES``), so the oracle path of
those tasks (``task.reference``) is the milestone path with the fix applied.
"""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from lopd.chat import ToolCall, format_tool_call, tool_system_prompt
from lopd.envs.acebench.oracle import fixed_path
from lopd.envs.acebench.phone import BaseApi, FoodPlatform, MessageApi, ReminderApi, Scenario
from lopd.envs.acebench.prompts import instructions
from lopd.envs.acebench.scoring import end_state, format_call, parse_path, process_score
from lopd.envs.acebench.travel import Travel
from lopd.envs.acebench.user import FINISH, ModelUser, ScriptedUser, SimulatedUser
from lopd.envs.common import MAX_CALLS_PER_TURN, answer_calls, read_turn
from lopd.types import Message, ResetResult, StepResult, Task, ToolSchema

CLASSES: dict[str, type[Scenario]] = {
    "BaseApi": BaseApi, "MessageApi": MessageApi, "ReminderApi": ReminderApi,
    "FoodPlatform": FoodPlatform, "Travel": Travel}
SPLITS = ("multi_step", "multi_turn")
_TYPES = {"dict": "object", "list": "array", "float": "number", "int": "integer",
          "str": "string", "bool": "boolean", "tuple": "array"}
USER_ENV = "LOPD_ACEBENCH_USER"
"""Environment variable naming the simulated user: a model (``smollm2-135m``, an HF directory)
or ``scripted``; a task's ``metadata["user"]`` takes precedence."""
LOG_ENV = "LOPD_ACEBENCH_LOG"
"""Environment variable naming a JSON-lines file to which every finished episode appends its
scores (id, end state, process score, state errors, steps, calls, user replies): the per-task
record ACEBench writes, for standard errors and error analysis beside ``lopd eval``."""


def data_dir() -> Path:
    return Path(__file__).parent / "data"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@cache
def _entries(split: str) -> dict[str, dict[str, Any]]:
    """Entries of one split keyed by id, with ``ground_truth`` and ``mile_stone`` attached."""
    if split not in SPLITS:
        raise ValueError(f"unknown ACEBench split {split!r} ({', '.join(SPLITS)})")
    name = f"data_agent_{split}.json"
    answers = {row["id"]: row for row in _jsonl(data_dir() / "possible_answer" / name)}
    entries = {}
    for entry in _jsonl(data_dir() / "task" / name):
        answer = answers[entry["id"]]
        entry["ground_truth"], entry["mile_stone"] = answer["ground_truth"], answer["mile_stone"]
        entries[entry["id"]] = entry
    return entries


def entry(entry_id: str) -> dict[str, Any]:
    split = "multi_turn" if "multi_turn" in entry_id else "multi_step"
    return _entries(split)[entry_id]


def _convert(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k not in ("type", "properties", "items")}
    kind = spec.get("type", "string")
    out["type"] = _TYPES.get(kind, kind)
    if isinstance(spec.get("properties"), dict):
        out["properties"] = {k: _convert(v) for k, v in spec["properties"].items()}
    if isinstance(spec.get("items"), dict):
        out["items"] = _convert(spec["items"])
    return out


def to_schema(doc: dict[str, Any]) -> ToolSchema:
    """An ACEBench function doc as a JSON-schema tool (``dict`` -> object, ``list`` -> array;
    a required name that is no argument, e.g. ``payment_methods``, is read as the argument it
    misspells)."""
    params = _convert(doc.get("parameters") or {"type": "dict"})
    params["type"] = "object"
    props = params.setdefault("properties", {})
    required = [r if r in props else r.rstrip("s") for r in params.get("required", [])]
    params["required"] = [r for r in required if r in props]
    return {"name": doc["name"], "description": doc.get("description", ""), "parameters": params}


def _parse_schema(schema: ToolSchema) -> ToolSchema:
    """Schema used only to parse: the tool and argument names are checked, nothing else."""
    props = {k: {} for k in schema["parameters"].get("properties", {})}
    return {"name": schema["name"], "parameters": {"type": "object", "properties": props}}


def oracle_calls(entry_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The task's first milestone path as calls, with ``ORACLE_FIXES`` applied."""
    milestones = entry(entry_id)["mile_stone"]
    path = milestones[0] if milestones and isinstance(milestones[0], list) else milestones
    calls = [call for stone in path for call in parse_path(stone)]
    return fixed_path(entry_id, calls)


def load_acebench_tasks(splits: list[str] | str | None = None, n: int | None = None) -> list[Task]:
    """ACEBench agent tasks of ``splits`` (default both), the first ``n`` of each."""
    if splits is None:
        splits = list(SPLITS)
    elif isinstance(splits, str):
        splits = [splits]
    tasks = []
    for split in splits:
        for item in list(_entries(split).values())[:n]:
            reference = "\n".join(format_tool_call(name, args)
                                  for name, args in oracle_calls(item["id"]))
            tasks.append(Task(
                id=item["id"], split=f"acebench-{split.replace('_', '-')}", domain="acebench",
                prompt=item["question"], tools=[to_schema(doc) for doc in item["function"]],
                reference=reference,
                metadata={"env": "acebench", "category": split, "entry_id": item["id"],
                          "involved_classes": list(item["involved_classes"])}))
    return tasks


def make_user(task: Task) -> SimulatedUser:
    """The task's simulated user: ``metadata["user"]``, else ``$LOPD_ACEBENCH_USER``, else
    the embedded SmolLM2."""
    name = task.metadata.get("user") or os.environ.get(USER_ENV) or "smollm2-135m"
    return ScriptedUser() if name == "scripted" else ModelUser(name)


class ACEBenchEnv:
    """One ACEBench agent task as an episode (see the module docstring)."""

    def __init__(self, task: Task, seed: int = 0, max_steps: int = 30,
                 max_calls: int = MAX_CALLS_PER_TURN, user: SimulatedUser | None = None,
                 max_replies: int = 4):
        self.task = task
        self.seed = seed  # the episode is determined by the task (greedy user); protocol only
        self.max_steps = max_steps
        self.max_calls = max_calls
        self.max_replies = max_replies
        self.entry = entry(task.metadata["entry_id"])
        self.multi_turn = "multi_turn" in self.entry["id"]
        self.user = user
        self.tools = [copy.deepcopy(t) for t in task.tools]
        self._parse_tools = [_parse_schema(t) for t in self.tools]
        self.offered = {t["name"] for t in self.tools}
        self._start()

    def _start(self) -> None:
        config = self.entry["initial_config"]
        self.instances: dict[str, Scenario] = {}
        for name in self.entry["involved_classes"]:
            instance = CLASSES[name]()
            instance.load(copy.deepcopy(config.get(name, {})))
            instance.load(copy.deepcopy(config.get("BaseApi", {})))
            self.instances[name] = instance
        self.calls: list[str] = []
        self.steps = self.tool_calls = self.errors = self.replies = 0
        self.done = False
        self._verdict: dict[str, Any] | None = None

    def reset(self) -> ResetResult:
        self._start()
        domain = "travel" if "Travel" in self.instances else "phone"
        if self.multi_turn:
            if self.user is None:
                self.user = make_user(self.task)
            first = self.user.start(self.entry["question"], domain)
        else:
            first = self.entry["question"]
        system = tool_system_prompt(instructions(self.multi_turn, domain), self.tools)
        messages: list[Message] = [{"role": "system", "content": system},
                                   {"role": "user", "content": first}]
        return ResetResult(messages=messages, tools=copy.deepcopy(self.tools))

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one offered tool on every involved instance that has it; the first result."""
        if name not in self.offered:
            return {"error": f"unknown tool '{name}'"}
        results = []
        for instance in self.instances.values():
            method = getattr(type(instance), name, None)
            if name.startswith("_") or name in ("load", "state") or not callable(method):
                continue
            try:
                results.append(getattr(instance, name)(**arguments))
            except Exception as err:  # noqa: BLE001 - ACEBench answers any raise as a result
                results.append({"error": f"Error during execution: {type(err).__name__}: {err}"})
        return results[0] if results else {"error": "No matching function found"}

    def step(self, assistant_text: str) -> StepResult:
        if self.done:
            return StepResult([], 0.0, True, self._info(final=True))
        self.steps += 1
        turn = read_turn(assistant_text, self._parse_tools, self.max_calls)
        self.calls += [format_call(i.name, i.arguments) for i in turn.items
                       if isinstance(i, ToolCall)]
        observation, calls, errors = answer_calls(turn, self.call)
        self.tool_calls += calls
        self.errors += errors
        if self.steps >= self.max_steps:
            return self._finish()
        if turn.items:
            return StepResult(observation, 0.0, False, self._info(final=False))
        if not self.multi_turn or self.replies >= self.max_replies:
            return self._finish()
        self.replies += 1
        reply = self.user.reply(turn.content)
        if FINISH in reply.lower():
            return self._finish()
        return StepResult([{"role": "user", "content": reply}], 0.0, False,
                          self._info(final=False))

    def states(self) -> list[dict[str, Any]]:
        """``[{class name: scored attributes}]`` in the order of ``involved_classes``."""
        return [{name: instance.state()} for name, instance in self.instances.items()]

    def score(self) -> dict[str, Any]:
        """``end_state`` (0/1), ``process`` and the checker's details."""
        verdict = end_state(self.states(), self.entry["ground_truth"])
        process = process_score(self.calls, self.entry["mile_stone"], verdict["valid"])
        return {"end_state": float(verdict["valid"]), "process": process,
                "state_errors": verdict["errors"], "not_compared": verdict["not_compared"]}

    def _finish(self) -> StepResult:
        self.done = True
        info = self._info(final=True)
        if os.environ.get(LOG_ENV):
            record = {"id": self.entry["id"], **self._verdict, "steps": self.steps,
                      "tool_calls": self.tool_calls, "user_replies": self.replies,
                      "calls": [c[:300] for c in self.calls[:50]]}
            with open(os.environ[LOG_ENV], "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return StepResult([], info["reward"], True, info)

    def _info(self, final: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"tool_calls": self.tool_calls, "errors": self.errors,
                                "steps": self.steps, "user_replies": self.replies}
        if final:
            if self._verdict is None:
                self._verdict = self.score()
            info.update(self._verdict, reward=self._verdict["process"],
                        success=bool(self._verdict["end_state"]))
        return info
