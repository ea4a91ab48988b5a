"""Helpers shared by the tool-using environments (ToolWorld, function tools, plugins, BFCL),
and the caps that bound what one assistant turn can cost.

Caps, one rule each, applied here for every environment:

- ``MAX_TURN_CHARS`` (``lopd.chat``, 100,000): characters of a turn that are read at all; the
  rest is ignored;
- ``MAX_CALLS_PER_TURN`` (20, the same number as BFCL's limit on call steps in one user turn;
  ``rollout.max_calls_per_turn`` in a run's config): ``<tool_call>`` blocks of one turn that are
  parsed and executed; blocks past it are neither;
- ``MAX_OBSERVATION_CHARS`` (20,000): characters of one observation message (error texts are
  cut sooner, to ``MAX_ERROR_CHARS``).

When a turn is cut, the observation ends with one more ``role=tool`` message saying so (an
``{"error": ...}``, counted as one error). So a turn costs at most ``max_calls`` calls (an
environment's argument, ``MAX_CALLS_PER_TURN`` by default) and a bounded parse, whatever the
model wrote.

``read_turn`` parses the turn block by block so that valid calls and parse errors come back in
the order they appear in the assistant's text: the i-th tool message answers the i-th block.

Every observation goes through ``tool_message``: its content is valid Unicode (``safe_text``),
at most ``MAX_OBSERVATION_CHARS`` long, and serialising it never raises, so whatever a tool
echoes back, the message renders.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lopd.chat import CALL_BLOCK, MAX_TURN_CHARS, ToolCall, clip, parse_tool_calls, safe_text
from lopd.types import Message, ToolSchema

MAX_CALLS_PER_TURN = 20
MAX_OBSERVATION_CHARS = 20_000


def bound_turn(text: Any, max_calls: int = MAX_CALLS_PER_TURN) -> tuple[str, int, int]:
    """(the part of ``text`` that is read, tool-call blocks cut off, characters cut off).

    The part read is the first ``MAX_TURN_CHARS`` characters, ending after the
    ``max_calls``-th ``<tool_call>`` block when there are more blocks than that."""
    if not isinstance(text, str):
        text = str(text)
    unread = max(0, len(text) - MAX_TURN_CHARS)
    text = text[:MAX_TURN_CHARS]
    blocks = CALL_BLOCK.finditer(text)
    kept = list(itertools.islice(blocks, max(max_calls, 0)))
    skipped = sum(1 for _ in blocks)
    if skipped:
        text = text[:kept[-1].end()] if kept else ""
    return text, skipped, unread


@dataclass
class Turn:
    """An assistant turn as the environments read it (see ``read_turn``)."""

    content: str
    """Free text outside the tool-call blocks (the final answer when there is no block)."""
    items: list[ToolCall | str] = field(default_factory=list)
    """One per block read, in order: a valid ``ToolCall`` or an error string."""
    skipped: int = 0
    """Blocks past the cap on calls: neither parsed nor executed."""
    unread: int = 0
    """Characters past ``MAX_TURN_CHARS``: not read."""
    max_calls: int = MAX_CALLS_PER_TURN
    """The cap the turn was read with."""

    def note(self) -> Message | None:
        """The observation telling the model its turn was cut (None when it was not)."""
        return cap_note(self.skipped, self.unread, self.max_calls)


def cap_note(skipped: int, unread: int, max_calls: int = MAX_CALLS_PER_TURN) -> Message | None:
    """The error observation saying what of a turn was not read or not executed, or None."""
    parts = []
    if unread:
        parts.append(f"the turn is {MAX_TURN_CHARS + unread} characters long; only the first "
                     f"{MAX_TURN_CHARS} were read")
    if skipped:
        parts.append(f"at most {max_calls} tool calls are executed per turn; the other "
                     f"{skipped} were not executed")
    return error_message("; ".join(parts)) if parts else None


def read_turn(text: Any, tools: Sequence[ToolSchema] | None,
              max_calls: int = MAX_CALLS_PER_TURN) -> Turn:
    """Parse the first ``max_calls`` blocks of ``text`` (within ``MAX_TURN_CHARS``) in order."""
    text, skipped, unread = bound_turn(text, max_calls)
    items: list[ToolCall | str] = []
    for match in CALL_BLOCK.finditer(text):
        parsed = parse_tool_calls(match.group(0), tools)
        items.extend(parsed.calls or parsed.errors)
    return Turn(CALL_BLOCK.sub("", text).strip(), items, skipped, unread, max_calls)


MAX_ERROR_CHARS = 1000


def compact(value: Any) -> str:
    """Compact JSON for tool observations (falls back to ``str`` for odd values, and to a
    placeholder for values that cannot even be printed, e.g. nested too deeply)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError, OverflowError):
        pass
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - an observation must always exist
        return f"<unprintable {type(value).__name__}>"


def tool_message(content: Any) -> Message:
    """A ``role=tool`` message whose content always renders (see the module docstring)."""
    return {"role": "tool", "content": bounded_text(compact(content))}


def bounded_text(text: str) -> str:
    """``text`` cut to ``MAX_OBSERVATION_CHARS`` (marked when cut), as valid Unicode."""
    return safe_text(clip(text, MAX_OBSERVATION_CHARS))


def error_message(error: str) -> Message:
    return tool_message({"error": clip(str(error), MAX_ERROR_CHARS)})


def answer_calls(turn: Turn, call: Callable[[str, dict], Any]) -> tuple[list[Message], int, int]:
    """Run one turn's parsed items (``read_turn``) through ``call(name, arguments)``.

    Returns the observation messages (plus ``Turn.note`` when the turn was cut), the tool calls
    made and the errors (parse errors, calls whose result is an ``{"error": ...}`` dict, the
    note), for environments built on tool calls.
    """
    observation: list[Message] = []
    calls = errors = 0
    for item in turn.items:
        if isinstance(item, str):
            errors += 1
            observation.append(error_message(item))
            continue
        result = call(item.name, item.arguments)
        calls += 1
        if isinstance(result, dict) and "error" in result:
            errors += 1
        observation.append(tool_message(result))
    note = turn.note()
    if note is not None:
        observation.append(note)
        errors += 1
    return observation, calls, errors
