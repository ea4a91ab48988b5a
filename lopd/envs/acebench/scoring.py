"""ACEBench's two agent scores, and the reading of its milestone strings.

**End-state accuracy** (``end_state``): the states of the episode's scenario instances (one
``{class name: {attribute: value}}`` per involved class, the scored attributes only, passed
through JSON so integer keys become strings as in ACEBench) against ``ground_truth``:

- the number of classes must be equal;
- each expected class is compared with the predicted one of the same name; an expected class
  whose name matches none (the data spells three of them ``ReminderAPI``, ``Reminderpi`` and
  ``BaseAPI``) is not compared, which is what ACEBench's checker amounts to;
- every scored attribute must be expected; an expected dict (inbox, reminders, users) must
  hold each of its expected keys with an equal value (extra keys are allowed); any other value
  (lists, flags) must be equal.

**Process score** (``process_score``): 1.0 when the end state is right; otherwise the share of
the milestone path's calls found in order (a subsequence, exact string match after
``strip()``) among the episode's calls written as ACEBench writes them
(``format_call``: ``[name(k='text', n=3)]``, strings in single quotes without escaping, other
values with Python's ``str``); with several alternative paths, the best one.

``parse_path`` reads a milestone string into calls for oracle replays. The strings are written
like Python but not always valid (``'Domino's'``): an apostrophe between two letters is read
as part of the word.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

Call = tuple[str, dict[str, Any]]
_APOSTROPHE = re.compile(r"(?<=[A-Za-z])'(?=[A-Za-z])")
_MARK = "\u2019"  # a right single quote stands in for the apostrophe while parsing


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as ACEBench records it for the process score."""
    def value(v: Any) -> str:
        return f"'{v}'" if isinstance(v, str) else str(v)

    try:
        return f"[{name}({', '.join(f'{k}={value(v)}' for k, v in arguments.items())})]"
    except (ValueError, RecursionError):  # a value Python cannot print: never a milestone
        return f"[{name}(<unprintable>)]"


def _subsequence_share(path: list[str], calls: list[str]) -> float:
    """Share of ``path``'s entries found in order in ``calls`` (1.0 for an empty path)."""
    if not path:
        return 1.0
    found, position = 0, 0
    for stone in path:
        while position < len(calls):
            position += 1
            if calls[position - 1].strip() == stone.strip():
                found += 1
                break
    return found / len(path)


def process_score(calls: list[str], milestones: list, end_state_ok: bool = False) -> float:
    """ACEBench's process score of one episode (see the module docstring)."""
    if end_state_ok:
        return 1.0
    if milestones and isinstance(milestones[0], list):
        return max(_subsequence_share(path, calls) for path in milestones)
    return _subsequence_share(list(milestones), calls)


def _compare_class(name: str, predicted: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    errors = []
    for attribute, value in predicted.items():
        if attribute not in expected:
            errors.append(f"{name}.{attribute}: not in the expected state")
            continue
        wanted = expected[attribute]
        if isinstance(wanted, dict):
            if not isinstance(value, dict):
                errors.append(f"{name}.{attribute}: expected a mapping")
                continue
            for key, item in wanted.items():
                if key not in value:
                    errors.append(f"{name}.{attribute}[{key!r}] missing")
                elif item != value[key]:
                    errors.append(f"{name}.{attribute}[{key!r}] differs")
        elif wanted != value:
            errors.append(f"{name}.{attribute} differs")
    return errors


def end_state(predicted: list[dict[str, Any]], expected: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"valid": bool, "errors": [...], "not_compared": [...]}`` (see the module docstring)."""
    try:
        predicted = json.loads(json.dumps(predicted))
    except (TypeError, ValueError, RecursionError) as err:
        return {"valid": False, "errors": [f"the state is not JSON: {err}"], "not_compared": []}
    if len(predicted) != len(expected):
        return {"valid": False, "errors": ["wrong number of classes"], "not_compared": []}
    errors: list[str] = []
    skipped: list[str] = []
    for reference in expected:
        names = set(reference)
        match = next((p for p in predicted if set(p) == names), None)
        if match is None:
            skipped.extend(sorted(names))
            continue
        for name in reference:
            errors += _compare_class(name, match[name], reference[name])
    return {"valid": not errors, "errors": errors[:20], "not_compared": skipped}


def _unmark(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(_MARK, "'")
    if isinstance(value, list):
        return [_unmark(v) for v in value]
    if isinstance(value, dict):
        return {_unmark(k): _unmark(v) for k, v in value.items()}
    return value


def parse_path(milestone: str) -> list[Call]:
    """The calls of one milestone string (``[f(a=1)]`` or ``[f(), g(b='x')]``)."""
    text = _APOSTROPHE.sub(_MARK, milestone.strip())
    node = ast.parse(text, mode="eval").body
    nodes = node.elts if isinstance(node, ast.List) else [node]
    calls = []
    for call in nodes:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise ValueError(f"not a keyword call: {milestone!r}")
        calls.append((call.func.id, {kw.arg: _unmark(ast.literal_eval(kw.value)) for kw in call.keywords}))
    return calls
