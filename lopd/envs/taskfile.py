"""Task files: JSONL, one task per line, named as a suite by their path (``*.jsonl``).

Fields of a line (``id`` and ``prompt`` required; unknown fields are an error, to catch typos):

- ``id``, ``prompt``: the task's unique id and the user's request;
- ``toolset``: import path of the tools (``module:Class`` or ``file.py:Class``, a relative file
  is read from the task file's folder): a ``lopd.envs.function_env.ToolService`` subclass or a
  list/dict of plain functions. The task then runs in ``FunctionEnv`` and needs ``checks``;
- ``env`` instead of ``toolset``: import path of an environment maker ``(task, seed=,
  max_steps=) -> Env`` (the ``lopd.types.Env`` protocol), for environments of your own;
- ``tools``: the tool names this task may use (default: all of the tool set), or, with ``env``,
  the tool schemas shown to the model;
- ``state``: the tool set's initial state (a JSON object);
- ``checks``: the checklist on the final state (``lopd.envs.function_env``);
- ``reference``: a reference solution, a list of ``{"name", "arguments"}`` calls (or text); used
  by ``lopd sft``, the bank's seed experiences and the SDFT/OPSD baselines;
- ``metadata``: anything else, kept in ``Task.metadata``; ``split`` and ``domain`` (defaults:
  the file's name and the tool set's name; ``lopd sft`` batches one domain at a time).

Every problem raises ``TaskFileError`` (a ``ValueError``) as ``FILE:LINE: what is wrong``.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from lopd.jsonl import json_lines
from lopd.types import Task

FIELDS = {"id", "prompt", "toolset", "env", "tools", "state", "checks", "reference", "metadata",
          "split", "domain"}
BUILTIN_ENVS = ("toolworld", "code", "humaneval", "bfcl")


class TaskFileError(ValueError):
    """A task file (or a task row) lopd cannot use; the message says where and why."""


def _absolute(ref: str, base_dir: Path | None) -> str:
    """``file.py:attr`` made absolute against ``base_dir``; module paths unchanged."""
    module_part, _, attr = ref.partition(":")
    if base_dir is None or not (module_part.endswith(".py") or "/" in module_part):
        return ref
    path = Path(module_part).expanduser()
    return f"{(path if path.is_absolute() else base_dir / path).resolve()}:{attr}"


def _toolset_task(row: dict[str, Any], where: str, base_dir: Path | None, split: str) -> Task:
    from lopd.envs.function_env import TaskSpecError, tool_task
    from lopd.envs.references import PluginError, resolve
    from lopd.tools import ToolSchemaError

    ref = _absolute(row["toolset"], base_dir)
    tools = row.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        raise TaskFileError(f"{where}: with 'toolset', 'tools' is a list of tool names")
    state = row.get("state", {})
    if not isinstance(state, dict):
        raise TaskFileError(f"{where}: 'state' must be a JSON object")
    try:
        return tool_task(row["id"], row["prompt"], ref, state=state, checks=row.get("checks"),
                         reference=row.get("reference"), split=split,
                         domain=row.get("domain", ""), tools=tools,
                         metadata=row.get("metadata"), toolset_object=resolve(ref))
    except (TaskSpecError, PluginError, ToolSchemaError) as error:
        raise TaskFileError(f"{where}: {error}") from error


def _env_task(row: dict[str, Any], where: str, base_dir: Path | None, split: str) -> Task:
    from lopd.envs.function_env import TaskSpecError, reference_text

    env = row["env"]
    tools = row.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) and "name" in t for t in tools):
        raise TaskFileError(f"{where}: with 'env', 'tools' is a list of tool schemas")
    metadata = dict(row.get("metadata") or {})
    if env in BUILTIN_ENVS:
        metadata["env"] = env
    else:
        metadata.update(env="custom", env_maker=_absolute(env, base_dir))
    for key in ("state", "checks"):
        if key in row:
            metadata[key] = row[key]
    try:
        reference = reference_text(row.get("reference"), None, where)
    except TaskSpecError as error:
        raise TaskFileError(str(error)) from None
    return Task(id=row["id"], split=split, domain=row.get("domain", env.rsplit(":", 1)[-1]),
                prompt=row["prompt"], tools=tools, reference=reference, metadata=metadata)


def task_from_row(row: Any, where: str = "task", base_dir: Path | None = None,
                  split: str = "train") -> Task:
    """One ``Task`` from a task-file row (see the module docstring)."""
    if not isinstance(row, dict):
        raise TaskFileError(f"{where}: a task is a JSON object, got {type(row).__name__}")
    unknown = sorted(set(row) - FIELDS)
    if unknown:
        raise TaskFileError(f"{where}: unknown fields {unknown} (fields: {', '.join(sorted(FIELDS))})")
    for key in ("id", "prompt"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise TaskFileError(f"{where}: '{key}' must be a non-empty string")
    if not isinstance(row.get("metadata", {}), dict):
        raise TaskFileError(f"{where}: 'metadata' must be a JSON object")
    split = str(row.get("split", split))
    if ("toolset" in row) == ("env" in row):
        raise TaskFileError(f"{where}: give exactly one of 'toolset' (tools from Python) or "
                            "'env' (an environment maker)")
    key = "toolset" if "toolset" in row else "env"
    if not isinstance(row[key], str) or not row[key]:
        raise TaskFileError(f"{where}: '{key}' must be an import path such as 'module:Name'")
    if key == "toolset":
        return _toolset_task(row, where, base_dir, split)
    return _env_task(row, where, base_dir, split)


def is_task_file(name: str) -> bool:
    return name.endswith(".jsonl")


def read_task_file(path: str | Path, n: int | None = None) -> list[Task]:
    """The tasks of a JSONL task file (first ``n`` when given); cached while the file is
    unchanged, each call returning its own copies."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise TaskFileError(f"task file {path}: no such file")
    stat = file.stat()
    tasks = _read_cached(str(file.resolve()), stat.st_mtime_ns, stat.st_size, str(path))
    tasks = tasks[:n] if n is not None else tasks
    return [replace(t, tools=copy.deepcopy(t.tools), metadata=copy.deepcopy(t.metadata))
            for t in tasks]


@lru_cache(maxsize=8)
def _read_cached(resolved: str, mtime_ns: int, size: int, shown: str) -> tuple[Task, ...]:
    file = Path(resolved)
    path = shown
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for where, number, row in json_lines(file, TaskFileError, shown=path):
        task = task_from_row(row, where, base_dir=file.parent.resolve(), split=file.stem)
        if task.id in seen:
            raise TaskFileError(f"{where}: task id {task.id!r} already on line {seen[task.id]}")
        seen[task.id] = number
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"task file {path}: no tasks in it")
    return tuple(tasks)


__all__ = ["TaskFileError", "is_task_file", "read_task_file", "task_from_row"]
