"""The simulated user of ACEBench's multi-turn tasks.

In a multi-turn task the agent does not see the task: it talks with a user who knows it (the
task's ``question`` is the user's instruction, e.g. "Your name is Grace. You want to send a
message to Frank..."). The user sees only what the agent writes to it (its turns without tool
calls), never a tool result, and ends the conversation by saying "finish conversation".
Its messages reach the agent as ``role=user`` observations, so they are never trained on
(action mask 0).

``ModelUser`` plays the user with a local causal LM (any HF directory, or the embedded
``smollm2-135m``, the default; on the CPU, in bf16 where bf16 is native), greedily, one line
of at most 32 tokens per turn, from a system prompt with the
instruction and rules written for lopd after ACEBench's (reveal the task step by step, invent
nothing, say "finish conversation" when done). ``ScriptedUser`` replays fixed lines (by default
the instruction itself, then "finish conversation"): deterministic, for tests.

How a weak user limits the numbers: ACEBench's user is a large chat model. A 135M user often
repeats or garbles the instruction, answers questions it should not, forgets to end the
conversation or ends it early, so multi-turn end-state accuracy here measures the agent *and*
its user. It is a lower bound on what the agent would score with a capable user, and is
comparable between agents only because every agent meets the same (greedy, deterministic)
user. ``finish conversation`` must come from the user; the conversation also ends after
``max_replies`` user replies or the environment's step cap.
"""

from __future__ import annotations

from functools import cache
from typing import Protocol

OPENING = "Is there anything you need help with today?"
FINISH = "finish conversation"
_RULES = {
    "phone": (
        "- Say one short line per message, as the user would.\n"
        "- Give the agent only what the current step needs, but give all of it (for a reminder: "
        "its title, description and time).\n"
        "- Never invent facts the instruction does not state; say you do not know instead.\n"
        "- When the agent asks which message to delete, answer as the instruction says.\n"
        "- When the agent asks if you need anything else, give the next unfinished task.\n"
    ),
    "travel": (
        "- Say one short line per message, as the user would.\n"
        "- Give the agent only what the current step needs.\n"
        "- Never invent facts the instruction does not state (an id, a date); say you do not "
        "know instead.\n"
        "- Confirm an operation only if the instruction agrees with it.\n"
        "- For a round trip, say at the start that you want to book a round-trip flight.\n"
    ),
}


class SimulatedUser(Protocol):
    """The user side of a multi-turn episode."""

    def start(self, instruction: str, domain: str) -> str:
        """The user's first message for ``instruction`` (``domain``: "phone" or "travel")."""
        ...

    def reply(self, agent_text: str) -> str:
        """The user's answer to the agent's message."""
        ...


def user_prompt(instruction: str, domain: str) -> str:
    """The system prompt of a model-played user."""
    rules = _RULES.get(domain, _RULES["phone"])
    return (f"You are a user talking with an assistant agent. Your instruction:\n{instruction}"
            f"\n\nRules:\n{rules}- When everything in the instruction is done, reply with the "
            f"single line '{FINISH}'.")


class ScriptedUser:
    """Says ``lines`` in order (default: the instruction), then "finish conversation"."""

    def __init__(self, lines: list[str] | None = None):
        self.lines = list(lines) if lines is not None else None
        self.queue: list[str] = []

    def start(self, instruction: str, domain: str) -> str:
        self.queue = list(self.lines) if self.lines is not None else [instruction]
        return self.queue.pop(0) if self.queue else FINISH

    def reply(self, agent_text: str) -> str:
        return self.queue.pop(0) if self.queue else FINISH


@cache
def _user_model(name: str):
    """(backend, renderer) of the user's model, loaded once per process."""
    from lopd.chat import ChatRenderer
    from lopd.generation import HFBackend
    from lopd.models import fast_bf16, load_model

    dtype = "bf16" if fast_bf16("cpu") else "fp32"  # bf16 weights decode fastest where native
    model, tokenizer = load_model(name, dtype=dtype, device="cpu")
    renderer = ChatRenderer(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id,
                        max_cached_tokens=16_384)
    return backend, renderer


class ModelUser:
    """A user played by a local causal LM (see the module docstring)."""

    def __init__(self, model: str = "smollm2-135m", max_new_tokens: int = 32,
                 max_chars: int = 600):
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.max_chars = max_chars
        self.messages: list[dict[str, str]] = []

    def start(self, instruction: str, domain: str) -> str:
        self.messages = [{"role": "system", "content": user_prompt(instruction, domain)},
                         {"role": "user", "content": OPENING}]
        return self._say()

    def reply(self, agent_text: str) -> str:
        self.messages.append({"role": "user", "content": agent_text[:self.max_chars * 4]})
        return self._say()

    def _say(self) -> str:
        """One greedy line from the model's side of the conversation (roles swapped: the
        agent's messages are its user turns); an empty line ends the conversation."""
        from lopd.generation import SamplingParams

        backend, renderer = _user_model(self.model)
        ids, _ = renderer.render(self.messages)
        prompt = ids + renderer.generation_prompt()
        tokens = backend.generate([prompt], SamplingParams(self.max_new_tokens, temperature=0.0))[0]
        text = renderer.tokenizer.decode(tokens, skip_special_tokens=True)
        line = next((part.strip() for part in text.splitlines() if part.strip()), FINISH)
        line = line[:self.max_chars]
        self.messages.append({"role": "assistant", "content": line})
        return line
