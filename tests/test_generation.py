"""The hand-written decode loop matches transformers' generate() and handles ragged batches."""

import functools
import json

import pytest
import torch

from lopd.chat import ChatRenderer, parse_tool_calls
from lopd.generation import HFBackend, SamplingParams, sample_next, sample_rows


def _greedy_reference(model, prompt, max_new, stop_ids):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False,
                         eos_token_id=sorted(stop_ids), pad_token_id=0)
    return out[0, len(prompt):].tolist()


def _prompts(tokenizer):
    renderer = ChatRenderer(tokenizer)
    texts = ["Say hi.", "List three colours, please, separated by commas.", "2+2=?"]
    return renderer, [renderer.render([{"role": "user", "content": t}], True)[0] for t in texts]


def test_greedy_matches_generate_on_ragged_batch(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    got = backend.generate(prompts, SamplingParams(max_new_tokens=12, temperature=0))
    for prompt, tokens in zip(prompts, got):
        assert tokens == _greedy_reference(model, prompt, 12, renderer.stop_ids)


def test_shared_prompts_are_prefilled_once_with_the_same_result(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    greedy = SamplingParams(max_new_tokens=10, temperature=0)
    together = backend.generate([prompts[0], prompts[1], prompts[0]], greedy)
    assert together == [backend.generate([p], greedy)[0] for p in (prompts[0], prompts[1], prompts[0])]
    sampled = backend.generate([prompts[0]] * 6, SamplingParams(max_new_tokens=10, temperature=1.5))
    assert len({tuple(s) for s in sampled}) > 1  # copied prefills still sample independently


def test_sampling_is_seeded_and_respects_top_p():
    logits = torch.tensor([[5.0, 4.0, -10.0, -10.0]]).repeat(200, 1)
    first = sample_next(logits, 1.0, 1.0, torch.Generator().manual_seed(3))
    again = sample_next(logits, 1.0, 1.0, torch.Generator().manual_seed(3))
    assert torch.equal(first, again)
    nucleus = sample_next(logits, 1.0, 0.5, torch.Generator().manual_seed(3))
    assert set(nucleus.tolist()) == {0}  # top-1 already holds > 0.5 of the mass
    assert set(first.tolist()) <= {0, 1} and 1 in first.tolist()


def test_top_k_one_is_greedy_and_top_k_stays_among_the_k_most_likely():
    logits = torch.randn(300, 50, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(1)
    assert torch.equal(sample_next(logits, 1.3, 1.0, generator, top_k=1), logits.argmax(-1))
    for top_p in (1.0, 0.95):
        drawn = torch.stack([sample_next(logits, 0.7, top_p, generator, top_k=5) for _ in range(20)], 1)
        allowed = logits.topk(5, dim=-1).indices  # (300, 5)
        assert (drawn[:, :, None] == allowed[:, None, :]).any(-1).all()
        assert len(set(drawn[0].tolist())) > 1  # still a sample, not the argmax
    unfiltered = torch.stack([sample_next(logits, 0.7, 1.0, generator) for _ in range(20)], 1)
    assert not (unfiltered[:, :, None] == allowed[:, None, :]).any(-1).all()  # the test can fail


def test_preallocated_cache_and_shared_system_prompt_change_no_token(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    system = [{"role": "system", "content": "You answer briefly. " * 6}]
    prompts += [renderer.render(system + [{"role": "user", "content": t}], True)[0]
                for t in ("one", "two two", "three three three")]
    stops = set(renderer.stop_ids) | set(range(3, len(tokenizer), 7))  # rows end at different steps
    outputs = {}
    for new_path in (False, True):
        backend = HFBackend(model, stops, tokenizer.pad_token_id, prefix_cache=new_path,
                            preallocate=new_path)
        assert backend.preallocate == new_path
        for temperature in (0.0, 1.0):
            params = SamplingParams(max_new_tokens=9, temperature=temperature, seed=4)
            outputs[new_path, temperature] = backend.generate(prompts + prompts[3:5], params)
        assert (backend.shared_tokens > 0) == new_path  # the common system prompt ran once
    assert outputs[True, 0.0] == outputs[False, 0.0]
    assert outputs[True, 1.0] == outputs[False, 1.0]
    assert len({len(o) for o in outputs[True, 1.0]}) > 1


@pytest.mark.slow
def test_real_smollm2_new_decode_path_gives_the_old_tokens_on_a_one_domain_batch():
    from lopd.envs import load_suite, make_env
    from lopd.models import load_model

    model, tokenizer = load_model("smollm2-135m")
    renderer = ChatRenderer(tokenizer)
    tasks = [t for t in load_suite("toolworld-train") if t.domain == "banking"][:3]
    prompts = [renderer.render(make_env(t).reset().messages)[0] + renderer.generation_prompt()
               for t in tasks]
    greedy = SamplingParams(max_new_tokens=24, temperature=0)
    new = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    old = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id, prefix_cache=False,
                    preallocate=False)
    got = new.generate(prompts, greedy)
    assert new.shared_tokens > 100  # the domain's system prompt was prefilled once
    assert got == old.generate(prompts, greedy)
    for prompt, tokens in zip(prompts, got):
        assert tokens == _greedy_reference(model, prompt, 24, renderer.stop_ids)


@pytest.mark.slow
def test_real_smollm2_greedy_matches_generate_and_calls_a_tool():
    from lopd.models import load_model

    model, tokenizer = load_model("smollm2-135m")
    renderer, prompts = _prompts(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    got = backend.generate(prompts[:2], SamplingParams(max_new_tokens=16, temperature=0))
    for prompt, tokens in zip(prompts[:2], got):
        assert tokens == _greedy_reference(model, prompt, 16, renderer.stop_ids)

    tool = {"name": "get_weather", "description": "Current weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}
    system = "You call tools. Tools:\n" + json.dumps(tool)
    # SmolLM2-135M needs a worked exchange in the prompt, not just a format description.
    shot = [{"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'},
            {"role": "tool", "content": '{"temp_c": 20}'},
            {"role": "assistant", "content": "It is 20 degrees in Rome."}]
    prompt, _ = renderer.render([{"role": "system", "content": system}, *shot,
                                 {"role": "user", "content": "What is the weather in Paris?"}], True)
    samples = backend.generate([prompt] * 16, SamplingParams(max_new_tokens=48, temperature=0.8, seed=1))
    parsed = [parse_tool_calls(tokenizer.decode(s, skip_special_tokens=True), [tool]) for s in samples]
    assert any(p.calls and p.calls[0].name == "get_weather" for p in parsed), [
        tokenizer.decode(s) for s in samples]


# -- cross-turn prefix reuse ---------------------------------------------------------------------

class EchoEnv:
    """Scripted multi-turn environment: answers each turn with a tool message, ends after
    ``turns`` turns (the tool message quotes the turn, so observations differ per episode)."""

    def __init__(self, task, seed=0, max_steps=30):
        self.task, self.turns, self.calls = task, int(task.metadata["turns"]), 0

    def reset(self):
        from lopd.types import ResetResult

        return ResetResult([{"role": "system", "content": "You count. " * 8},
                            {"role": "user", "content": self.task.prompt}], [])

    def step(self, text):
        from lopd.types import StepResult

        self.calls += 1
        if self.calls >= self.turns:
            return StepResult([], 1.0, True, {"tool_calls": self.calls})
        return StepResult([{"role": "tool", "content": f"result {self.calls}: {text[:12]!r}"}],
                          0.0, False, {"tool_calls": self.calls})


def _echo_rollouts(tiny, prefix_cache, temperature=0.0, extra_stops=frozenset()):
    from lopd.rollout import RolloutConfig, run_episodes
    from lopd.types import Task

    model, tokenizer = tiny
    renderer = ChatRenderer(tokenizer)
    backend = HFBackend(model, set(renderer.stop_ids) | set(extra_stops), tokenizer.pad_token_id,
                        prefix_cache=prefix_cache)
    tasks = [Task(f"t{i}", "test", "count", "count " * i, metadata={"turns": t})
             for i, t in enumerate((1, 3, 2, 4, 3))]
    config = RolloutConfig(max_steps=6, max_new_tokens=7, temperature=temperature)
    trajs = run_episodes([EchoEnv(t) for t in tasks], backend, renderer, config, seed=1)
    return backend, [t.input_ids for t in trajs]


def test_prefix_cache_gives_identical_multi_turn_rollouts(tiny):
    _, greedy_off = _echo_rollouts(tiny, False)
    _, greedy_on = _echo_rollouts(tiny, True)
    assert greedy_on == greedy_off
    # The tiny random model is near-uniform when sampled: with every 7th id a stop id, turns end
    # at different steps (rows leave the batch mid-turn) and episodes at different rounds.
    stops = set(range(3, len(tiny[1]), 7))
    off_backend, off = _echo_rollouts(tiny, False, temperature=1.0, extra_stops=stops)
    on_backend, on = _echo_rollouts(tiny, True, temperature=1.0, extra_stops=stops)
    assert on == off  # same seeded draws on the same logits (up to float rounding)
    assert len({len(ids) for ids in on}) >= 3  # ragged: episodes end at different lengths
    assert off_backend.reused_tokens == 0 and on_backend.reused_tokens > 0
    # the episodes' common system prompt is prefilled once more, as one row, then reused
    assert on_backend.shared_tokens > 0 and off_backend.shared_tokens == 0
    assert (on_backend.prefilled_tokens + on_backend.reused_tokens
            == off_backend.prefilled_tokens + on_backend.shared_tokens)
    assert on_backend.prefilled_tokens < off_backend.prefilled_tokens / 2
    _, again = _echo_rollouts(tiny, True, temperature=1.0, extra_stops=stops)
    assert again == on  # seeded sampling stays deterministic


def test_extending_a_cached_sequence_gives_full_prefill_logits(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    out = backend.generate(prompts[:2], SamplingParams(max_new_tokens=5, temperature=0))
    tool = renderer.render_message({"role": "tool", "content": "42"})[0]
    extended = [prompts[0] + out[0] + tool, prompts[1] + out[1] + tool[:2], prompts[2]]
    logits, *_ = backend._prefill(extended)  # rows: long past, short past, no past
    assert backend.reused_tokens == sum(len(p) + len(o) - 1 for p, o in zip(prompts, out))
    plain = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id, prefix_cache=False)
    reference, *_ = plain._prefill(extended)
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=0)
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([extended[0]])).logits[0, -1]
    torch.testing.assert_close(logits[0], alone, atol=1e-4, rtol=0)


def test_prefix_cache_keeps_only_the_latest_call_within_its_bound(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    greedy = SamplingParams(max_new_tokens=3, temperature=0)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    backend.generate(prompts[:2], greedy)
    backend.generate([prompts[2]], greedy)
    assert [len(ids) for ids in backend._entries] == [len(prompts[2]) + 2]
    assert next(iter(backend._entries))[:len(prompts[2])] == tuple(prompts[2])
    bounded = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id,
                        max_cached_tokens=len(prompts[0]) + 2)
    bounded.generate(prompts, greedy)
    assert sum(len(ids) for ids in bounded._entries) <= len(prompts[0]) + 2
    # an in-place weight update (an optimizer step) makes the stored KV stale: it is dropped
    out = backend.generate([prompts[2]], greedy)
    with torch.no_grad():
        next(model.parameters()).mul_(1.0)
    before = backend.reused_tokens
    backend.generate([prompts[2] + out[0]], greedy)
    assert backend.reused_tokens == before


# -- sync points: sampling on the device, reading tokens back every `sync_every` steps ----------

def test_sample_rows_draws_what_sample_next_draws_and_per_row():
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    for temperature, top_p, top_k in ((1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 0.95, 8), (0.0, 1.0, 0)):
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
        every = sample_rows(logits, params, torch.Generator().manual_seed(2), torch.arange(6), 6)
        assert torch.equal(every, sample_next(logits, temperature, top_p,
                                              torch.Generator().manual_seed(2), top_k))
        some = torch.tensor([1, 4, 5])  # rows 0, 2, 3 have left the batch: the others draw the same
        assert torch.equal(sample_rows(logits[some], params, torch.Generator().manual_seed(2),
                                       some, 6), every[some])


@pytest.fixture(scope="module")
def varied():
    """A 2-layer Llama with untied random weights over 256 ids: unlike ``tiny``, whose greedy
    output repeats one token, its greedy outputs vary, so stop ids end rows at chosen steps."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=False, initializer_range=0.2,
                         max_position_embeddings=512, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    prompts = [torch.randint(3, 256, (n,), generator=torch.Generator().manual_seed(n)).tolist()
               for n in (5, 9, 14, 7, 3)]
    return model, prompts


def test_sync_every_keeps_generate_greedy_tokens_and_the_prefix_cache(varied):
    model, prompts = varied
    free = [_greedy_reference(model, p, 12, {0}) for p in prompts]
    stops = {0, free[0][5], free[2][2]}  # ends rows 0 and 2 there, the others where they occur
    batch = prompts + [prompts[1]]
    reference = [_greedy_reference(model, p, 12, stops) for p in batch]
    assert len({len(r) for r in reference}) > 2 and 12 in {len(r) for r in reference}
    second = [p + r + [7, 8, 9] for p, r in zip(batch, reference)][:4]  # + a tool message
    second_reference = [_greedy_reference(model, p, 10, stops) for p in second]
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    entries = {}
    for sync_every in (1, 4, 16):
        backend = HFBackend(model, stops, 0, sync_every=sync_every)
        assert backend._sdpa_full_attention  # sync_every > 1 passes the 4D mask
        assert backend.generate(batch, greedy) == reference
        entries[sync_every] = {ids: kv.clone() for ids, kv in backend._entries.items()}
        assert backend.generate(second, SamplingParams(max_new_tokens=10, temperature=0)) == \
            second_reference
        assert backend.reused_tokens == sum(len(p) + len(r) - 1 for p, r in
                                            zip(batch[:4], reference[:4]))
        assert backend.generate([batch[3]] * 2, greedy) == [reference[3]] * 2  # no padding
    assert list(entries[1]) == list(entries[4]) == list(entries[16])  # same ids, same order
    for ids, kv in entries[1].items():  # the same real positions, the same numbers
        torch.testing.assert_close(entries[4][ids], kv, atol=1e-5, rtol=0)
        torch.testing.assert_close(entries[16][ids], kv, atol=1e-5, rtol=0)


def test_sync_every_sampling_is_seeded_and_independent_of_sync_every(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    batch = prompts + prompts[:2]
    ragged = set(renderer.stop_ids) | set(range(3, len(tokenizer), 7))  # near-uniform: ~1/7 stops
    params = SamplingParams(max_new_tokens=20, temperature=1.0, top_p=0.95, seed=5)
    runs = {}
    for stops in ("never", "ragged"):
        for sync_every in (1, 3, 4, 16):
            backend = HFBackend(model, renderer.stop_ids if stops == "never" else ragged,
                                tokenizer.pad_token_id, sync_every=sync_every)
            runs[stops, sync_every] = backend.generate(batch, params)
    # no row stops early: every setting draws the same noise for the same rows
    assert runs["never", 1] == runs["never", 3] == runs["never", 4] == runs["never", 16]
    assert all(len(o) == 20 for o in runs["never", 1])
    # rows stop at different steps: with sync_every > 1 each row's draws are its own
    assert runs["ragged", 3] == runs["ragged", 4] == runs["ragged", 16]
    assert len({len(o) for o in runs["ragged", 4]}) > 2
    assert all(o[-1] in ragged or len(o) == 20 for o in runs["ragged", 4])
    assert all(t not in ragged for o in runs["ragged", 4] for t in o[:-1])


@pytest.mark.parametrize("sync_every", [4, 16])
def test_sync_every_multi_turn_rollouts_match_stepwise_decoding(tiny, sync_every, monkeypatch):
    _, stepwise = _echo_rollouts(tiny, True)
    monkeypatch.setattr(HFBackend, "__init__", functools.partialmethod(
        HFBackend.__init__, sync_every=sync_every))
    backend, synced = _echo_rollouts(tiny, True)
    assert backend.sync_every == sync_every and backend.reused_tokens > 0
    assert synced == stepwise
    stops = set(range(3, len(tiny[1]), 7))
    _, sampled = _echo_rollouts(tiny, True, temperature=1.0, extra_stops=stops)
    _, again = _echo_rollouts(tiny, False, temperature=1.0, extra_stops=stops)
    assert sampled == again  # with and without the prefix cache
    assert len({len(ids) for ids in sampled}) >= 3  # ragged: episodes end at different lengths


def test_inverse_cdf_sampling_matches_the_distribution_and_skips_zero_mass():
    from lopd.generation import _inverse_cdf

    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(20_000, 1)
    draws = sample_next(probs.log(), 1.0, 1.0, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=5).float() / len(draws)
    assert counts[1] == 0 and counts[4] == 0  # zero probability: never drawn
    assert torch.allclose(counts, probs[0], atol=0.015)  # 3+ standard errors at n = 20k
    edges = torch.tensor([0.0, 0.5, 0.7999, 0.8, 1.0 - 2 ** -24])  # interval ends, u near 1
    assert _inverse_cdf(probs[:5], edges).tolist() == [0, 2, 2, 3, 3]
    unnormalised = torch.tensor([[0.0, 3.0, 0.0]]).repeat(2, 1)
    assert _inverse_cdf(unnormalised, torch.tensor([0.0, 1.0 - 2 ** -24])).tolist() == [1, 1]
