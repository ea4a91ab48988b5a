"""Helpers shared by the tool-using environments (ToolWorld, BFCL).

``parse_in_order`` wraps ``lopd.chat.parse_tool_calls`` so that valid calls and parse errors
come back in the order they appear in the assistant's text: each ``<tool_call>`` block is
parsed on its own, so the i-th tool message answers the i-th block.

Every observation goes through ``tool_message``: its content is valid Unicode (``safe_text``)
and serialising it never raises, so whatever a tool echoes back, the message renders. Error
texts are cut to ``MAX_ERROR_CHARS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from lopd.chat import CALL_OPEN, ToolCall, clip, parse_tool_calls, safe_text
from lopd.types import Message, ToolSchema


def parse_in_order(text: str, tools: Sequence[ToolSchema]) -> tuple[str, list[ToolCall | str]]:
    """(free text, items) where each item is a valid ``ToolCall`` or an error string."""
    whole = parse_tool_calls(text, tools)
    if whole.attempted_calls <= 1:
        return whole.content, [*whole.calls, *whole.errors]
    items: list[ToolCall | str] = []
    for segment in text.split(CALL_OPEN)[1:]:
        parsed = parse_tool_calls(CALL_OPEN + segment, tools)
        items.extend(parsed.calls or parsed.errors)
    return whole.content, items


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
    return {"role": "tool", "content": safe_text(compact(content))}


def error_message(error: str) -> Message:
    return tool_message({"error": clip(str(error), MAX_ERROR_CHARS)})


def answer_calls(items: Sequence[ToolCall | str],
                 call: Callable[[str, dict], Any]) -> tuple[list[Message], int, int]:
    """Run one turn's parsed items (``parse_in_order``) through ``call(name, arguments)``.

    Returns the observation messages, the tool calls made and the errors (parse errors plus
    calls whose result is an ``{"error": ...}`` dict), for environments built on tool calls.
    """
    observation: list[Message] = []
    calls = errors = 0
    for item in items:
        if isinstance(item, str):
            errors += 1
            observation.append(error_message(item))
            continue
        result = call(item.name, item.arguments)
        calls += 1
        if isinstance(result, dict) and "error" in result:
            errors += 1
        observation.append(tool_message(result))
    return observation, calls, errors
