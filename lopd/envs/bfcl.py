"""BFCL v4 multi-turn (base, miss_func, miss_param, long_context) as an ``Env``.

Data, function docs, executable backends and the scorer all come from the installed
``bfcl-eval`` wheel. Its top-level package needs dependencies that ``--no-deps`` leaves out, so
only dependency-free modules are imported (``constants.default_prompts``,
``constants.executable_backend_config``, ``constants.type_mappings`` and
``eval_checker.multi_turn_eval``); the small loaders of ``bfcl_eval.utils`` are re-implemented
here, matching ``load_dataset_entry(category, include_language_specific_hint=True)``.

Semantics, as in ``BaseHandler.inference_multi_turn_FC`` and ``eval_runner``:
- user turns come one at a time: an assistant message without any tool call ends the current
  turn, and the next user turn arrives as a ``role=user`` observation;
- miss_func: the held-out function docs (``missed_function``) are added to the tools at their
  turn, whose (empty) user message becomes BFCL's "I have updated some more functions..."
  prompt with the new docs in front (the prompting-model variant);
- each assistant message's valid calls form one step, executed with BFCL's
  ``execute_multi_turn_func_call`` (it evals ``name(k=repr(v))``, so the name must be a public
  method of the entry's backends with a doc and every key one of that doc's parameters, an
  identifier, before anything is evaluated); results come back as ``role=tool`` messages.
  As in BFCL, argument types and required arguments are not enforced (a wrong call returns
  BFCL's "Error during execution" text), and a held-out miss_func function is executed if
  called before it is announced (BFCL's executor maps every backend method); error messages
  only ever list the tools offered so far;
- more than ``MAXIMUM_STEP_LIMIT`` (20) call-steps in one user turn force-quits: the entry
  fails, as BFCL fails force-terminated entries; within one assistant message at most
  ``max_calls`` calls are read and executed (``lopd.envs.common.MAX_CALLS_PER_TURN``, also
  20), the others are reported as not executed;
- at the end, the per-turn lists of executed steps go to BFCL's ``multi_turn_checker``
  (state check of every backend's public attributes + cumulative response check after each
  turn with non-empty ground truth): reward 1 if valid, else 0.

Deviations (documented, both more lenient for malformed output, neither changes the score of
well-formed output): a malformed ``<tool_call>`` gets an error observation and the turn goes
on (BFCL's prompting decoder would end the turn); and ``max_steps`` caps the assistant messages
within one user turn (then the next user turn starts). ``excluded_function`` (present in 18
entries) is ignored, as the wheel's own code ignores it. Backend instances live in a
module-global cache of the wheel keyed by model name + entry id; each episode uses a fresh key
and purges its instances when done or garbage-collected.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import keyword
import os
import re
import weakref
from functools import cache
from pathlib import Path
from typing import Any

from lopd.chat import clip, format_tool_call, tool_system_prompt
from lopd.envs.common import MAX_CALLS_PER_TURN, error_message, read_turn, tool_message
from lopd.types import Message, ResetResult, StepResult, Task

CATEGORIES = ["base", "miss_func", "miss_param", "long_context"]
INSTRUCTIONS = (
    "You are an expert in composing functions. You are given a question and a set of possible "
    "functions. Based on the question, you will need to make one or more function/tool calls "
    "to achieve the purpose. If none of the functions can be used, point it out. If the given "
    "question lacks the parameters required by the function, also point it out.\n\n"
    "At each turn, you should try your best to complete the tasks requested by the user within "
    "the current turn. Continue to output functions to call until you have fulfilled the "
    "user's request to the best of your ability. Once you have no more functions to call, "
    "the system will consider the current turn complete and proceed to the next turn or task."
)
_PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
_episode_counter = itertools.count()


def _bfcl():
    """The dependency-free parts of the wheel (imported lazily: ``lopd.envs`` stays light)."""
    from bfcl_eval.constants import default_prompts, executable_backend_config, type_mappings
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

    return default_prompts, executable_backend_config, type_mappings, multi_turn_checker, \
        multi_turn_utils


def data_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'bfcl-eval' package is not installed (pip install --no-deps)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@cache
def _func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """A class's function docs with BFCL's Python hint appended (shared, never mutated)."""
    _, backend_config, *_ = _bfcl()
    filename = backend_config.MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    docs = _jsonl(data_dir() / "multi_turn_func_doc" / filename)
    for doc in docs:
        doc["description"] = doc["description"] + _PYTHON_HINT
    return tuple(docs)


@cache
def load_entries(category: str) -> dict[str, dict[str, Any]]:
    """Entries of one category keyed by id, with ``function``/``missed_function`` docs filled
    in and the ground truth attached, as ``bfcl_eval.utils.load_dataset_entry`` builds them."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r} ({CATEGORIES})")
    name = f"BFCL_v4_multi_turn_{category}.json"
    truths = {row["id"]: row["ground_truth"] for row in _jsonl(data_dir() / "possible_answer" / name)}
    entries = {}
    for entry in _jsonl(data_dir() / name):
        functions = [doc for cls in entry["involved_classes"] for doc in _func_docs(cls)]
        missed: dict[str, list[dict]] = {}
        for turn, names in entry.get("missed_function", {}).items():
            missed[turn] = []
            for func_name in names:
                index = next(i for i, doc in enumerate(functions) if doc["name"] == func_name)
                missed[turn].append(functions.pop(index))
        entry["function"], entry["missed_function"] = functions, missed
        entry["ground_truth"] = truths[entry["id"]]
        entries[entry["id"]] = entry
    return entries


def _cast_types(properties: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """BFCL type names -> JSON-schema types (as the wheel's ``_cast_to_openai_type`` does)."""
    for spec in properties.values():
        kind = spec.get("type", "string")
        if kind == "float":
            spec["format"] = "float"
            spec["description"] = spec.get("description", "") + " This is a float type value."
        spec["type"] = mapping.get(kind, "string")
        if "properties" in spec:
            spec["properties"] = _cast_types(spec["properties"], mapping)
        elif isinstance(spec.get("items"), dict):
            items = spec["items"]
            items["type"] = mapping.get(items.get("type", "string"), "string")
            if "properties" in items:
                items["properties"] = _cast_types(items["properties"], mapping)
    return properties


def to_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function doc as an OpenAI-style tool schema (the ``response`` part dropped)."""
    return json.loads(_to_schema(json.dumps(doc, sort_keys=True)))


@cache
def _to_schema(doc_json: str) -> str:
    doc = json.loads(doc_json)
    *_, type_mappings, _, _ = _bfcl()
    params = doc.get("parameters") or {}
    params["type"] = "object"
    params["properties"] = _cast_types(params.get("properties", {}), type_mappings.GORILLA_TO_OPENAPI)
    return json.dumps({"name": doc["name"], "description": doc["description"], "parameters": params})


@cache
def _backend_class(class_name: str) -> type:
    _, backend_config, *_ = _bfcl()
    module = importlib.import_module(backend_config.CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)


def backend_methods(involved_classes: list[str]) -> dict[str, inspect.Signature]:
    """Public method name -> signature for the entry's backends."""
    return _backend_methods(tuple(involved_classes))


@cache
def _backend_methods(involved_classes: tuple[str, ...]) -> dict[str, inspect.Signature]:
    methods = {}
    for class_name in involved_classes:
        for name, member in inspect.getmembers(_backend_class(class_name), inspect.isfunction):
            if not name.startswith("_"):
                methods[name] = inspect.signature(member)
    return methods


def parse_call_string(call: str, involved_classes: list[str]) -> tuple[str, dict[str, Any]]:
    """A ground-truth string such as ``sort('a.pdf')`` -> (name, keyword arguments)."""
    node = ast.parse(call.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a simple call: {call!r}")  # noqa: TRY004
    name = node.func.id
    params = [p for p in backend_methods(involved_classes)[name].parameters if p != "self"]
    arguments = {params[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    arguments.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
    return name, arguments


def ground_truth_turns(entry_id: str) -> list[list[tuple[str, dict[str, Any]]]]:
    entry = _entry(entry_id)
    return [[parse_call_string(c, entry["involved_classes"]) for c in turn]
            for turn in entry["ground_truth"]]


def _entry(entry_id: str) -> dict[str, Any]:
    category = entry_id.removeprefix("multi_turn_").rsplit("_", 1)[0]
    return load_entries(category)[entry_id]


def _turn_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def load_bfcl_tasks(categories: list[str] | str | None = None, n: int | None = None) -> list[Task]:
    """BFCL multi-turn tasks of ``categories`` (default: all four), the first ``n`` of each."""
    if categories is None:
        categories = list(CATEGORIES)
    elif isinstance(categories, str):
        categories = [categories]
    tasks = []
    for category in categories:
        for entry in list(load_entries(category).values())[:n]:
            reference = []
            for index, turn in enumerate(ground_truth_turns(entry["id"])):
                reference.append(f"[user turn {index + 1}]")
                reference += [format_tool_call(name, args) for name, args in turn]
            tasks.append(Task(
                id=entry["id"], split=f"bfcl-{category}", domain="bfcl",
                prompt=_turn_text(entry["question"][0]),
                tools=[to_schema(doc) for doc in entry["function"]],
                reference="\n".join(reference),
                metadata={"env": "bfcl", "category": category, "entry_id": entry["id"],
                          "turns": len(entry["question"]),
                          "involved_classes": list(entry["involved_classes"])},
            ))
    return tasks


def _relaxed(schema: dict[str, Any]) -> dict[str, Any]:
    """Schema used only to parse: argument names are checked, types and required are not.

    BFCL executes whatever the model wrote (a wrong type or a missing argument comes back as
    an "Error during execution" result), and some ground truths themselves disagree with the
    docs' types (e.g. ``close_ticket(ticket_id='ticket_001')`` for an integer ``ticket_id``).
    """
    props = {k: {"description": v.get("description", "")}
             for k, v in schema["parameters"].get("properties", {}).items()}
    return {"name": schema["name"], "parameters": {"type": "object", "properties": props}}


_UNKNOWN_TOOL = re.compile(r"^unknown tool '(.*)' \(available: .*\)$", re.DOTALL)


def _purge(keys: list[str]) -> None:
    """Drop this episode's backend instances from the wheel's module-global cache."""
    *_, utils = _bfcl()
    table = vars(utils)  # copied before the scan: a finalizer may purge another episode meanwhile
    for name in [k for k in list(table) if any(k.startswith(key + "_") for key in keys)]:
        table.pop(name, None)


class BFCLEnv:
    """One BFCL multi-turn entry as an episode (see the module docstring)."""

    def __init__(self, task: Task, seed: int = 0, max_steps: int = 30,
                 max_calls: int = MAX_CALLS_PER_TURN):
        self.task = task
        self.seed = seed
        self.max_steps = max_steps
        self.max_calls = max_calls
        self.entry = _entry(task.metadata["entry_id"])
        category = self.entry["id"].rsplit("_", 1)[0]
        self.long_context = "long_context" in category or "composite" in category
        self.methods = backend_methods(self.entry["involved_classes"])
        every_doc = self.entry["function"] + [
            d for docs in self.entry["missed_function"].values() for d in docs]
        self._parse_tools = [_relaxed(to_schema(doc)) for doc in every_doc]
        self.key = f"lopd_ep{os.getpid()}_{next(_episode_counter)}x"  # "x": no key prefixes another
        self._finalizer = weakref.finalize(self, _purge, [self.key])
        self._reset_state()

    def _reset_state(self) -> None:
        self.tools = [to_schema(doc) for doc in self.entry["function"]]
        self.turn = 0
        self.turn_steps: list[list[list[str]]] = [[]]
        self.turn_messages = 0
        self.steps = self.tool_calls = self.errors = 0
        self.force_quit = self.done = False
        self._verdict: dict[str, Any] | None = None

    def reset(self) -> ResetResult:
        _purge([self.key])
        self._reset_state()
        system = tool_system_prompt(INSTRUCTIONS, self.tools)
        messages: list[Message] = [{"role": "system", "content": system},
                                   {"role": "user", "content": _turn_text(self.entry["question"][0])}]
        return ResetResult(messages=messages, tools=list(self.tools))

    def _hide_held_out(self, error: str) -> str:
        """Unknown-tool errors list only the tools offered so far, not held-out ones."""
        match = _UNKNOWN_TOOL.match(error)
        if not match:
            return error
        offered = ", ".join(t["name"] for t in self.tools)
        return f"unknown tool '{match.group(1)}' (available: {offered})"

    def _call_string(self, name: str, arguments: dict[str, Any]) -> str:
        """``name(k=repr(v), ...)`` for BFCL's executor, or a ``ValueError`` saying why the
        call cannot be written as Python (never anything else is evaluated)."""
        if name not in self.methods:
            raise ValueError(f"'{clip(name)}' cannot be executed")
        bad = [clip(str(k)) for k in arguments
               if not (isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k))]
        if bad:
            raise ValueError(f"{name}: argument names must be Python identifiers, got {bad}")
        try:
            return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"
        except (ValueError, RecursionError) as err:
            raise ValueError(f"{name}: an argument cannot be written as Python ({err})") from None

    def _execute(self, calls: list[str]) -> list[str]:
        *_, utils = _bfcl()
        results, _ = utils.execute_multi_turn_func_call(
            calls, self.entry["initial_config"], self.entry["involved_classes"], self.key,
            self.entry["id"], long_context=self.long_context, is_evaL_run=False)
        return results

    def step(self, assistant_text: str) -> StepResult:
        if self.done:
            return StepResult([], 0.0, True, self._info(final=True))
        self.steps += 1
        self.turn_messages += 1
        turn = read_turn(assistant_text, self._parse_tools, self.max_calls)
        items = turn.items
        calls, slots, observation = [], [], []
        for item in items:
            if isinstance(item, str):
                slots.append(error_message(self._hide_held_out(item)))
                continue
            try:
                call = self._call_string(item.name, item.arguments)
            except ValueError as err:
                slots.append(error_message(str(err)))
                continue
            slots.append(None)
            calls.append(call)
        self.errors += sum(slot is not None for slot in slots)
        results = iter(self._execute(calls) if calls else [])
        for slot in slots:
            observation.append(slot if slot is not None else tool_message(next(results)))
        if (note := turn.note()) is not None:
            observation.append(note)
            self.errors += 1
        if calls:
            self.tool_calls += len(calls)
            self.turn_steps[self.turn].append(calls)
            if len(self.turn_steps[self.turn]) > self._step_limit():
                self.force_quit = True
                return self._finish()
        if items and self.turn_messages < self.max_steps:
            return StepResult(observation, 0.0, False, self._info(final=False))
        return self._next_turn(observation)

    def _step_limit(self) -> int:
        default_prompts, *_ = _bfcl()
        return default_prompts.MAXIMUM_STEP_LIMIT

    def _next_turn(self, observation: list[Message]) -> StepResult:
        self.turn += 1
        self.turn_messages = 0
        if self.turn >= len(self.entry["question"]):
            return self._finish()
        self.turn_steps.append([])
        messages = [dict(m) for m in self.entry["question"][self.turn]]
        added = self.entry["missed_function"].get(str(self.turn))
        if added:
            default_prompts, *_ = _bfcl()
            new = [to_schema(doc) for doc in added]
            self.tools = self.tools + new
            functions = "\n".join(json.dumps(t, separators=(",", ":")) for t in new)
            messages = [{"role": "user", "content": default_prompts.
                         DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
                             functions=functions)}]
        info = self._info(final=False)
        info["tools"] = list(self.tools)
        observation = observation + [{"role": m["role"], "content": m["content"]}
                                     for m in messages]
        return StepResult(observation, 0.0, False, info)

    def score(self) -> dict[str, Any]:
        """BFCL's verdict on the episode (``{"valid": bool, ...}``)."""
        if self.force_quit or len(self.turn_steps) != len(self.entry["ground_truth"]):
            return {"valid": False, "error_type": "multi_turn:force_terminated"}
        *_, checker, _ = _bfcl()
        eval_key = f"{self.key}_score"
        try:
            return checker.multi_turn_checker(
                self.turn_steps, self.entry["ground_truth"], self.entry,
                self.entry["id"].rsplit("_", 1)[0], eval_key)
        except Exception as err:  # noqa: BLE001 - the checker asserts on odd states
            return {"valid": False, "error_type": "multi_turn:checker_error",
                    "error_message": f"{type(err).__name__}: {err}"}
        finally:
            _purge([eval_key])

    def _finish(self) -> StepResult:
        self.done = True
        info = self._info(final=True)
        _purge([self.key])
        return StepResult([], info["reward"], True, info)

    def _info(self, final: bool) -> dict[str, Any]:
        info: dict[str, Any] = {"tool_calls": self.tool_calls, "errors": self.errors,
                                "steps": self.steps, "turn": self.turn}
        if final:
            if self._verdict is None:
                self._verdict = self.score()
            verdict = self._verdict
            info.update(reward=float(bool(verdict.get("valid"))), success=bool(verdict.get("valid")),
                        error_type=verdict.get("error_type", ""),
                        error_message=str(verdict.get("error_message", ""))[:300],
                        force_quit=self.force_quit)
        return info
