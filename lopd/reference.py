"""Reference trajectories: a task's reference solution played through its environment.

They serve as supervised warm-start data (`lopd sft`), as the bank's seed experiences, as the
composer's cold-start data, and as the demonstrations of the SDFT baseline. A ToolWorld
reference (one ``<tool_call>`` per line) is played one call per assistant turn, each followed by
the environment's real tool result, then a short final answer; a code reference becomes one
assistant turn holding the program in a fenced block. The assistant turns are rendered from
text (mask 1 on their tokens), which is right for supervised data: these tokens were not sampled.
"""

from __future__ import annotations

from lopd.chat import ChatRenderer
from lopd.types import Task, Trajectory

FINAL_ANSWER = "Done."


def reference_turns(task: Task) -> list[str]:
    """The assistant turns that replay ``task.reference``."""
    if not task.reference:
        return []
    if task.tools:
        calls = [line for line in task.reference.splitlines() if line.strip()]
        return calls + [FINAL_ANSWER]
    program = task.reference.strip()
    return [program if program.startswith("```") else f"```python\n{program}\n```"]


def reference_trajectory(task: Task, renderer: ChatRenderer, max_steps: int = 30) -> Trajectory:
    """Play the reference through a fresh environment; the result carries its real reward."""
    from lopd.envs import make_env

    env = make_env(task, seed=0, max_steps=max_steps)
    first = env.reset()
    messages = list(first.messages)
    prompt_len = len(renderer.render(messages)[0])
    reward, success, tool_calls = 0.0, False, 0
    for turn in reference_turns(task):
        messages.append({"role": "assistant", "content": turn})
        result = env.step(turn)
        tool_calls = int(result.info.get("tool_calls", tool_calls))
        if result.done:
            reward, success = float(result.reward), bool(result.info.get("success", False))
            break
        messages += result.observation
    ids, mask = renderer.render(messages)
    spans, start = [], None
    for index, bit in enumerate(mask + [0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            spans.append((start, index))
            start = None
    turns = len(spans)
    stats = {"interaction_steps": float(turns), "tool_calls": float(tool_calls),
             "tool_calls_per_step": tool_calls / max(turns, 1)}
    return Trajectory(task=task, input_ids=ids, action_mask=mask, turn_spans=spans,
                      prompt_len=prompt_len, messages=messages, reward=reward, success=success,
                      stats=stats)
