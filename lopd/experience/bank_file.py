"""Seed an experience bank from a JSONL file of trajectories (``method.bank_file``).

The authors build their bank offline from a file of trajectories; lopd seeds from the training
tasks' reference solutions by default. This reads one JSON object per line:

    {"task_id": "...", "task": "task text", "reward": 1.0,
     "messages": [{"role": "system", "content": "..."}, ...], "domain": "optional"}

and turns each line whose ``reward >= min_reward`` into a bank row (``source="seed"``, step 0)
with its condensed trace, plus its full transcript (``lopd.experience.transcripts``). A bad line
stops the load with an error that names the file, the line and the field; nothing is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lopd.experience.bank import Experience
from lopd.experience.condense import condense_trajectory
from lopd.jsonl import json_lines
from lopd.types import Message


@dataclass
class FileExperience:
    """One accepted line: its bank row and the transcript it came from."""

    experience: Experience
    messages: list[Message]


class BankFileError(ValueError):
    """A line of a bank file that cannot be used; the message names the file and line."""


def _field(row: dict, name: str, kind: type, where: str):
    value = row.get(name)
    if not isinstance(value, kind):
        raise BankFileError(f"{where}: field '{name}' must be a {kind.__name__}, got {value!r:.80}")
    return value


def _messages(row: dict, where: str) -> list[Message]:
    messages = _field(row, "messages", list, where)
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content", ""), str):
            raise BankFileError(f"{where}: messages[{index}] must be {{'role': str, 'content': str}}")
    return [{"role": m["role"], "content": m.get("content", "")} for m in messages]


def read_bank_file(path: str | Path, min_reward: float = 1.0) -> list[FileExperience]:
    """Parse and validate every line of ``path``; rows below ``min_reward`` are skipped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"method.bank_file: {path} is not a file")
    accepted: list[FileExperience] = []
    for where, _, row in json_lines(path, BankFileError):
        if not isinstance(row, dict):
            raise BankFileError(f"{where}: each line must be a JSON object")
        task_id = _field(row, "task_id", str, where)
        task_text = _field(row, "task", str, where)
        reward = row.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) \
                or not math.isfinite(reward):
            raise BankFileError(f"{where}: field 'reward' must be a finite number, got {reward!r:.80}")
        messages = _messages(row, where)
        if not task_id.strip() or not task_text.strip():
            raise BankFileError(f"{where}: task_id and task must not be empty")
        if reward < min_reward:
            continue
        trace = condense_trajectory(messages, task_text)
        domain = str(row.get("domain") or "file")
        accepted.append(FileExperience(
            Experience(task_id=task_id, domain=domain, task_text=task_text, trace=trace,
                       reward=float(reward), step_added=0, source="seed"), messages))
    return accepted
