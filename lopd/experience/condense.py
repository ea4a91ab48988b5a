"""Condense a trajectory into a compact, human-readable experience trace.

The paper's bank stores "the task description plus the action->result trace, with verbose
observations removed". We keep, in order:

    Task: <task text>
    1. call search_flights(origin='SFO', dest='NRT') -> {"flights": [{"id": "F1", ...}]}…
    2. call book_flight(flight_id='F1') -> {"status": "booked"}
    User: <a later user turn, in multi-turn tasks>
    Answer: <the final assistant text>

Tool calls come from assistant messages written as ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` (parsed here with a regex + ``json``; malformed blocks are skipped, never
fatal). Tool results are the ``role="tool"`` messages, paired in order with the calls of the
preceding assistant turn, whitespace-collapsed and cut to ``max_result_chars``. Code tasks use
``condense_code`` (final program + test outcome) instead.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from lopd.experience.bank import Experience

if TYPE_CHECKING:
    from lopd.types import Message, Trajectory

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN_CALL_RE = re.compile(r"<tool_call>.*", re.DOTALL)  # an unterminated trailing block
_CODE_BLOCK_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
CODE_DOMAINS = ("code", "coding", "humaneval", "mbpp")


def _cut(text: str, n: int) -> str:
    """Collapse whitespace to single spaces and cut to ``n`` characters (with an ellipsis)."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: max(n - 1, 0)] + "…"


def parse_tool_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(name, arguments)`` of every well-formed ``<tool_call>`` block in ``text``.

    A block must hold a JSON object with a string ``name``; ``arguments`` (or ``parameters``)
    may be an object or a JSON string of one. Anything else is skipped.
    """
    calls = []
    for body in _TOOL_CALL_RE.findall(text):
        try:
            obj = json.loads(body.strip())
        except (json.JSONDecodeError, ValueError):
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, ValueError):
                continue
        if args is None:
            args = {}
        if not isinstance(args, dict):
            continue
        calls.append((obj["name"], args))
    return calls


def format_call(name: str, arguments: dict[str, Any], max_arg_chars: int = 80) -> str:
    """``name(k='v', n=3)`` with each value's repr cut to ``max_arg_chars``."""
    args = ", ".join(f"{k}={_cut(repr(v), max_arg_chars)}" for k, v in arguments.items())
    return f"{name}({args})"


def _strip_calls(text: str) -> str:
    return _OPEN_CALL_RE.sub("", _TOOL_CALL_RE.sub("", text)).strip()


def condense_trajectory(trajectory_messages: list[Message], task_text: str,
                        max_result_chars: int = 200, max_answer_chars: int = 300,
                        max_task_chars: int = 1000) -> str:
    """Task + numbered tool calls with their (cut) results + the final answer, one per line.

    The prompt (system and first user message) is dropped: the task text stands for it. Later
    user turns are kept as ``User:`` lines. A tool result with no pending call (e.g. the
    environment's complaint about a malformed call) is written as ``k. (no call) -> ...``.
    The answer is the text, outside tool-call blocks, of the last assistant message.
    """
    lines = [f"Task: {_cut(task_text, max_task_chars)}"]
    pending: list[int] = []  # indices into ``lines`` of calls still waiting for a result
    step = 0
    seen_assistant = False
    answer = ""
    for msg in trajectory_messages:
        role, content = msg.get("role", ""), msg.get("content") or ""
        if role == "assistant":
            seen_assistant = True
            pending = []
            for name, args in parse_tool_calls(content):
                step += 1
                lines.append(f"{step}. call {format_call(name, args)}")
                pending.append(len(lines) - 1)
            answer = _strip_calls(content)
        elif role == "tool":
            result = _cut(content, max_result_chars)
            if pending:
                lines[pending.pop(0)] += f" -> {result}"
            else:
                step += 1
                lines.append(f"{step}. (no call) -> {result}")
        elif role == "user" and seen_assistant:
            lines.append(f"User: {_cut(content, max_result_chars)}")
    if answer:
        lines.append(f"Answer: {_cut(answer, max_answer_chars)}")
    return "\n".join(lines)


def condense_code(task_text: str, program: str, test_summary: str,
                  max_program_chars: int = 4000, max_task_chars: int = 1000) -> str:
    """Task + the final program (kept verbatim, cut to ``max_program_chars``) + test outcome."""
    program = program.strip("\n")
    if len(program) > max_program_chars:
        program = program[:max_program_chars] + "\n# …"
    return (f"Task: {_cut(task_text, max_task_chars)}\n"
            f"Program:\n```python\n{program}\n```\n"
            f"Tests: {_cut(test_summary, 300)}")


def extract_program(text: str) -> str:
    """The last fenced Python block of ``text`` (or the whole text if it has none)."""
    blocks = _CODE_BLOCK_RE.findall(text)
    return blocks[-1] if blocks else text


def _is_code_task(traj: Trajectory) -> bool:
    md = traj.task.metadata
    return md.get("kind") == "code" or traj.task.domain.lower() in CODE_DOMAINS


def experience_from_trajectory(traj: Trajectory, step: int,
                               source: str = "rollout") -> Experience:
    """One bank row from a (successful) trajectory, added at training step ``step``.

    Code tasks (``task.metadata["kind"] == "code"`` or a code domain) are condensed with
    ``condense_code``: the program is the last fenced block of the last assistant message,
    the test summary is ``traj.stats["test_summary"]`` / ``task.metadata["test_summary"]`` if
    set, else the reward. Everything else goes through ``condense_trajectory``.
    """
    task = traj.task
    if _is_code_task(traj):
        last = next((m.get("content") or "" for m in reversed(traj.messages)
                     if m.get("role") == "assistant"), "")
        summary = (traj.stats.get("test_summary") or task.metadata.get("test_summary")
                   or f"reward={traj.reward:.2f} success={traj.success}")
        trace = condense_code(task.prompt, extract_program(last), str(summary))
    else:
        trace = condense_trajectory(traj.messages, task.prompt)
    return Experience(task_id=task.id, domain=task.domain, task_text=task.prompt, trace=trace,
                      reward=float(traj.reward), step_added=int(step), source=source)
