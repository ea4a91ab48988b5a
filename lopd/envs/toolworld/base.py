"""ToolWorld building blocks: tool declarations, declarative state checks, task specs.

A domain is a class whose public methods decorated with ``@tool`` are the agent's tools. Each
declares an explicit JSON schema (``Param`` per argument), so ``lopd.chat.parse_tool_calls``
type-checks the model's arguments before the method runs. The state is a JSON-able dict
(deep-copied at construction into ``lopd.envs.journal``'s tracked dicts and lists, which read,
compare and serialise as plain ones), which makes checks and determinism trivial. Invalid
operations raise ``ToolError`` and come back to the agent as ``{"error": ...}``.

Hostile input. ``Domain.call`` is the one gate every call goes through, and it never raises:
it validates the arguments against the schema (types, finite numbers, the ``Param`` ranges and
string lengths), runs the tool with its mutations journaled, turns any exception into an error
result, and undoes the call if it would break a state invariant (``state_problems``: no
non-finite number anywhere, plus each domain's own rules such as valid times or non-negative
stock). So no model output can crash an episode or leave a state that later fails. Cost: no
copy of the state per call (the journal undoes what the call changed); a call that changes
nothing skips the checks, one that does is checked for non-finite numbers among the values it
wrote, then against the domain's rules (which read the state: their cost per turn is bounded by
``lopd.envs.common.MAX_CALLS_PER_TURN``).

Checks are declarative (``Check``: an op, a path into the state and a value) so that they are
easy to describe in plain language and to evaluate against the final and initial states.
Goal checks say what the task asks for; guard checks (``guard=True``) catch collateral damage
(other accounts unchanged, no stray bookings). A guard only earns credit when at least one goal
check passes, so an agent that does nothing scores 0 rather than the share of the guards.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lopd.chat import clip, validate_arguments
from lopd.envs.journal import Journal, track
from lopd.envs.journal import non_finite_paths as _non_finite_in  # the one walk of a state
from lopd.types import ToolSchema

_MISSING = object()
_TOOL_CACHE: dict[type, dict[str, Callable]] = {}
_SCHEMA_CACHE: dict[type, dict[str, ToolSchema]] = {}
MAX_STRING = 2000  # default maxLength of a string argument
MAX_AMOUNT = 1e9  # largest amount or price a tool accepts, in dollars
MAX_COUNT = 1_000_000  # largest quantity (units, stock change, threshold) a tool accepts


class ToolError(Exception):
    """An invalid operation (unknown id, insufficient funds, ...): returned as an error dict."""


@dataclass(frozen=True)
class Param:
    """One argument: JSON type, description and the bounds ``Domain.call`` enforces
    (``minimum``/``maximum`` inclusive, ``above`` exclusive, ``max_length`` for strings,
    ``MAX_STRING`` when not given)."""

    type: str
    description: str
    required: bool = True
    enum: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    max_length: int | None = None

    def spec(self) -> dict[str, Any]:
        """The JSON-schema property of this argument."""
        spec: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.enum:
            spec["enum"] = list(self.enum)
        for key, value in (("minimum", self.minimum), ("maximum", self.maximum),
                           ("exclusiveMinimum", self.above)):
            if value is not None:
                spec[key] = value
        if self.type == "string":
            spec["maxLength"] = self.max_length or MAX_STRING
        return spec


def tool(description: str, **params: Param) -> Callable:
    """Mark a domain method as a tool with an explicit schema (arguments in this order)."""

    def mark(method: Callable) -> Callable:
        method._tool_spec = (description, params)
        return method

    return mark


@dataclass(frozen=True)
class Check:
    """One boolean predicate on the final state.

    ops: ``eq`` (value at path equals ``value``; floats within 1e-6), ``missing`` (path absent),
    ``unchanged`` (equal to the initial state at path), ``same_except`` (in the dict at path,
    every key not listed in ``value`` is as it was: same keys, same values; listed keys may
    change, appear or disappear),
    ``kept_except`` (like ``same_except`` but new keys may have been added),
    ``match`` / ``no_match`` (some / no element of the collection at path has all the fields of
    ``value``), ``count`` (the collection at path has ``value`` elements).
    """

    name: str
    description: str
    op: str
    path: tuple[Any, ...]
    value: Any = None
    guard: bool = False


@dataclass
class TaskSpec:
    goal: str
    state: dict[str, Any]
    checks: list[Check]
    reference: list[tuple[str, dict[str, Any]]]
    tier: int


def get_path(state: Any, path: tuple[Any, ...]) -> Any:
    node = state
    for key in path:
        if isinstance(node, dict) and key in node or isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
            node = node[key]
        else:
            return _MISSING
    return node


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, bool) or isinstance(b, bool):
            return a is b
        return abs(a - b) < 1e-6
    return a == b


def _elements(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.values())
    return list(node) if isinstance(node, list) else []


def _matches(item: Any, fields: dict[str, Any]) -> bool:
    return isinstance(item, dict) and all(_equal(item.get(k, _MISSING), v) for k, v in fields.items())


def check_passes(check: Check, initial: dict, final: dict) -> bool:
    node = get_path(final, check.path)
    if check.op == "missing":
        return node is _MISSING
    if node is _MISSING:
        return False
    if check.op == "eq":
        return _equal(node, check.value)
    if check.op == "unchanged":
        return node == get_path(initial, check.path)
    if check.op == "same_except":
        before = get_path(initial, check.path)
        if not isinstance(node, dict) or not isinstance(before, dict):
            return False
        touched = set(check.value)
        if set(node) - touched != set(before) - touched:
            return False
        return all(node[k] == before[k] for k in node if k not in touched)
    if check.op == "kept_except":
        before = get_path(initial, check.path)
        if not isinstance(node, dict) or not isinstance(before, dict):
            return False
        return all(node.get(k, _MISSING) == v for k, v in before.items() if k not in check.value)
    if check.op == "match":
        return any(_matches(item, check.value) for item in _elements(node))
    if check.op == "no_match":
        return not any(_matches(item, check.value) for item in _elements(node))
    if check.op == "count":
        return len(_elements(node)) == check.value
    raise ValueError(f"unknown check op {check.op!r}")


def evaluate(checks: list[Check], initial: dict, final: dict) -> list[bool]:
    """Per-check pass/fail; guards count only when some goal check passes (module docstring)."""
    raw = [check_passes(c, initial, final) for c in checks]
    any_goal = any(ok for ok, c in zip(raw, checks) if not c.guard)
    return [ok and (any_goal or not c.guard) for ok, c in zip(raw, checks)]


class Domain:
    """Base class of a ToolWorld domain (see the module docstring)."""

    name = "base"
    description = ""
    example: tuple[str, dict[str, Any]] = ("", {})

    def __init__(self, state: dict[str, Any]):
        self.journal = Journal()
        self.state = track(state, self.journal)
        self._initial_problems: set[str] | None = None

    @classmethod
    def tool_methods(cls) -> dict[str, Callable]:
        if cls in _TOOL_CACHE:
            return _TOOL_CACHE[cls]
        found = {}
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_") and hasattr(member, "_tool_spec"):
                found[name] = member
        ordered = dict(sorted(found.items(), key=lambda kv: kv[1].__code__.co_firstlineno))
        _TOOL_CACHE[cls] = ordered
        return ordered

    @classmethod
    def schemas(cls) -> list[ToolSchema]:
        """Fresh JSON schemas of the tools (the caller may change them)."""
        schemas = []
        for name, method in cls.tool_methods().items():
            description, params = method._tool_spec
            properties = {key: param.spec() for key, param in params.items()}
            required = [k for k, p in params.items() if p.required]
            schemas.append({
                "name": name, "description": description,
                "parameters": {"type": "object", "properties": properties, "required": required},
            })
        return schemas

    @classmethod
    def _schemas_by_name(cls) -> dict[str, ToolSchema]:
        """The schemas ``call`` validates against (built once per class, never handed out)."""
        if cls not in _SCHEMA_CACHE:
            _SCHEMA_CACHE[cls] = {schema["name"]: schema for schema in cls.schemas()}
        return _SCHEMA_CACHE[cls]

    def _lookup(self, collection: str, key: str, what: str) -> dict:
        """``state[collection][key]``, or a ToolError naming the unknown ``what``."""
        found = self.state[collection].get(key)
        if found is None:
            raise ToolError(f"unknown {what} '{clip(key)}'")
        return found

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool; every failure comes back as ``{"error": ...}`` (never raises).

        See the module docstring: arguments are validated first, and a call that raises or
        would break a state invariant leaves the state as it was.
        """
        method = self.tool_methods().get(name) if isinstance(name, str) else None
        if method is None:
            return {"error": f"unknown tool '{clip(str(name))}'"}
        problems = validate_arguments(arguments, self._schemas_by_name()[name])
        if problems:
            return {"error": "; ".join(problems)}
        self.state = self.journal.adopt(self.state)  # in case it was changed outside a call
        known, root = self._known_problems(), self.state
        self.journal.begin()
        try:
            result = method(self, **arguments)
        except ToolError as err:
            self._roll_back(root)
            return {"error": str(err)}
        except Exception as err:  # noqa: BLE001 - model input must never crash an episode
            self._roll_back(root)
            return {"error": f"{name}: {type(err).__name__}: {clip(str(err), 200)}"}
        broken = self._new_problems(root, known)
        if broken:
            self._roll_back(root)
            return {"error": f"{name}: rejected, it would leave an invalid state "
                             f"({'; '.join(broken[:3])})"}
        return result

    def _roll_back(self, root: dict[str, Any]) -> None:
        self.journal.undo()
        self.state = root

    def _new_problems(self, root: dict[str, Any], known: set[str]) -> list[str]:
        """Invariants the call just broke: a non-finite number among the values it wrote,
        then (only if it changed anything) the domain's rules. A read costs nothing here."""
        if self.state is not root:  # the tool replaced the whole state: check all of it
            broken = [p for p in self.state_problems() if p not in known]
            if not broken:
                self.journal.commit()
                self.state = track(self.state, self.journal)
            return broken
        bad = self.journal.commit()
        if not self.journal.changed():
            return []
        if bad:
            return [f"non-finite number at {'/'.join(map(str, path))}" for path in bad]
        return [p for p in self._rule_problems() if p not in known]

    def _known_problems(self) -> set[str]:
        """Invariants the state broke before any call (never blamed on a call)."""
        if self._initial_problems is None:
            self._initial_problems = set(self.state_problems())
        return self._initial_problems

    def state_problems(self) -> list[str]:
        """Broken invariants of the current state; empty when it is valid. Never raises."""
        problems = [f"non-finite number at {'/'.join(map(str, path))}"
                    for path in non_finite_paths(self.state)]
        return problems + self._rule_problems()

    def _rule_problems(self) -> list[str]:
        try:
            return self.domain_problems()
        except Exception as err:  # noqa: BLE001 - a state the rules cannot even read is broken
            return [f"unreadable state ({type(err).__name__}: {clip(str(err))})"]

    def domain_problems(self) -> list[str]:
        """The domain's own invariants (overridden by each domain)."""
        return []

    @staticmethod
    def generate(rng: random.Random, tier: int) -> TaskSpec:
        raise NotImplementedError


def money(value: float) -> float:
    return round(float(value), 2)


def _has_non_finite(state: Any) -> bool:
    stack = [state]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, float) and not math.isfinite(node):
            return True
    return False


def non_finite_paths(state: Any) -> list[tuple[Any, ...]]:
    """Paths of every NaN or infinite float in a JSON-like value."""
    return _non_finite_in(state) if _has_non_finite(state) else []


def is_count(value: Any, low: int = 0, high: int | None = None) -> bool:
    """``value`` is an int (not a bool) with ``low <= value`` (``<= high`` when given)."""
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


def is_amount(value: Any, positive: bool = False) -> bool:
    """``value`` is a finite, non-negative (or positive) int or float, not a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return value > 0 if positive else value >= 0


def pick(rng: random.Random, options: list[str], **fields: Any) -> str:
    """One phrasing out of several, filled in with ``fields``."""
    return rng.choice(options).format(**fields)


def guard_others(
    name: str, what: str, path: tuple[Any, ...], touched: list[Any], allow_new: bool = False
) -> Check:
    """Guard: nothing else in the collection at ``path`` changed (or, with ``allow_new``,
    nothing that existed was changed or removed)."""
    op = "kept_except" if allow_new else "same_except"
    return Check(name, f"no other {what} changed", op, path, list(touched), guard=True)


@dataclass
class Names:
    """Pools of plain-language names the generators draw from."""

    people: list[str] = field(default_factory=lambda: [
        "Maria Lopez", "John Smith", "Aisha Khan", "Wei Chen", "Olga Petrova", "Kwame Mensah",
        "Sofia Rossi", "Liam Murphy", "Yuki Tanaka", "Carlos Diaz", "Fatima Zahra", "Noah Brown",
        "Emma Weber", "Ravi Patel", "Lena Novak", "Omar Haddad", "Ines Silva", "Jonas Berg",
    ])


NAMES = Names()
