"""Each choice offered for parity with the authors' code changes what it says it changes."""

import json

import pytest
import torch

from lopd.batch import collate
from lopd.composer import Compressor
from lopd.framing import LatentPlacement
from lopd.losses import latent_anchor
from lopd.teacher import apply_splice, plan_splice


def _reference_batch(tokenizer, n=1):
    from lopd.chat import ChatRenderer
    from lopd.envs import load_suite
    from lopd.reference import reference_trajectory

    renderer = ChatRenderer(tokenizer)
    trajs = [reference_trajectory(t, renderer) for t in load_suite("toolworld-train", n=n)]
    return collate(trajs, tokenizer.pad_token_id), trajs


def test_framing_text_surrounds_the_latent_slots_inside_the_first_user_message(tiny):
    model, tokenizer = tiny
    batch, (traj,) = _reference_batch(tokenizer)
    placement = LatentPlacement.build("framed", tokenizer)
    embed = model.get_input_embeddings()
    latent = torch.randn(1, 4, model.config.hidden_size)
    mask = torch.ones(1, 4, dtype=torch.bool)
    placed, context, context_mask = placement.place(batch, latent, mask, embed)
    before, after = len(placement.before_ids), len(placement.after_ids)
    assert context.shape[1] == before + 4 + after
    plan = plan_splice(placed.attention_mask, placed.prompt_lens, context_mask)
    with torch.no_grad():
        inputs = apply_splice(plan, embed(batch.input_ids), context)[0]
        expected_frame = embed(torch.tensor(placement.before_ids + placement.after_ids))
    slots = plan.ctx_dest[0]
    torch.testing.assert_close(inputs[slots[:before]], expected_frame[:before])
    torch.testing.assert_close(inputs[slots[before:before + 4]], latent[0])
    torch.testing.assert_close(inputs[slots[before + 4:]], expected_frame[before:])
    # inserted right after the first user message's header, before the task text
    at = int(placed.prompt_lens[0])
    header = list(placement.header_ids)
    assert batch.input_ids[0, at - len(header):at].tolist() == header
    user_ids = tokenizer(traj.messages[1]["content"], add_special_tokens=False)["input_ids"]
    assert batch.input_ids[0, at:at + len(user_ids)].tolist() == user_ids
    assert at < traj.prompt_len  # inside the prompt, not after it
    # the latent slots keep their gradient, the framing has none
    latent.requires_grad_(True)
    _, context, _ = placement.place(batch, latent, mask, embed)
    context.sum().backward()
    assert torch.equal(latent.grad, torch.ones_like(latent))


def test_after_prompt_placement_changes_nothing(tiny):
    model, tokenizer = tiny
    batch, _ = _reference_batch(tokenizer)
    latent, mask = torch.randn(1, 4, model.config.hidden_size), torch.ones(1, 4, dtype=torch.bool)
    placement = LatentPlacement.build("after_prompt", tokenizer)
    placed, context, same_mask = placement.place(batch, latent, mask, model.get_input_embeddings())
    assert placed is batch and context is latent and same_mask is mask


def test_framed_rows_without_latents_get_no_framing(tiny):
    model, tokenizer = tiny
    placement = LatentPlacement.build("framed", tokenizer)
    latent = torch.randn(2, 3, model.config.hidden_size)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    _, framed_mask = placement.wrap(latent, mask, model.get_input_embeddings())
    assert framed_mask[0].sum() == len(placement.before_ids) + 2 + len(placement.after_ids)
    assert not framed_mask[1].any()


def _compressor(block, layers, scale="embedding_norm"):
    torch.manual_seed(0)
    return Compressor(16, 16, num_queries=4, n_layers=layers, n_heads=2, mlp_ratio=4.0,
                      query_init_std=0.02, target_norm=3.0, block=block, latent_scale=scale)


def test_shared_compressor_holds_one_blocks_parameters_applied_n_times():
    one, eight = _compressor("shared", 1), _compressor("shared", 8)
    independent = _compressor("independent", 8)
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert len(eight.blocks) == 1 and count(eight) == count(one)
    assert count(independent) > 7 * count(eight.blocks[0])
    eight.load_state_dict(one.state_dict())
    memory, pad = torch.randn(2, 5, 16), torch.zeros(2, 5, dtype=torch.bool)
    out_one, _ = one(memory, pad)
    out_eight, _ = eight(memory, pad)
    assert not torch.allclose(out_one, out_eight)  # same weights, applied 8 times
    # the resampler's keys/values include the latents themselves: padding memory is ignored
    pad_last = torch.tensor([[False] * 4 + [True]] * 2)
    changed = memory.clone()
    changed[:, -1] = 100.0
    torch.testing.assert_close(eight(memory, pad_last)[0], eight(changed, pad_last)[0])


def test_latent_scale_choices():
    memory, pad = torch.randn(2, 5, 16), torch.zeros(2, 5, dtype=torch.bool)
    rescaled, _ = _compressor("independent", 2)(memory, pad)
    torch.testing.assert_close(rescaled.norm(dim=-1), torch.full((2, 4), 3.0))
    raw, _ = _compressor("shared", 2, scale="layernorm")(memory, pad)
    torch.testing.assert_close(raw.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(raw.var(-1, unbiased=False), torch.ones(2, 4), atol=1e-3, rtol=0)


def test_anchor_mean_is_the_sum_over_values():
    c = torch.tensor([[[1.0, 2.0], [0.0, -1.0]]])  # (1, L=2, d=2)
    r = torch.zeros_like(c)
    assert latent_anchor(c, r).item() == pytest.approx(6.0)  # 1 + 4 + 0 + 1
    assert latent_anchor(c, r, "mean").item() == pytest.approx(1.5)  # 6 / (2 * 2)


def _bank_file(tmp_path, rows):
    path = tmp_path / "bank.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _row(task_id, reward):
    return {"task_id": task_id, "task": f"do {task_id}", "reward": reward,
            "messages": [{"role": "system", "content": "You are a banking agent."},
                         {"role": "user", "content": f"do {task_id}"},
                         {"role": "assistant", "content": "<tool_call>{}</tool_call>"}]}


def test_bank_file_min_reward_and_clear_errors(tmp_path):
    from lopd.experience.bank_file import read_bank_file

    path = _bank_file(tmp_path, [_row("a", 1.0), _row("b", 0.0), _row("c", 0.5)])
    assert [r.experience.task_id for r in read_bank_file(path, 1.0)] == ["a"]
    assert len(read_bank_file(path, 0.0)) == 3
    bad = dict(_row("d", 1.0), reward=float("nan"))
    path.write_text(json.dumps(_row("a", 1.0)) + "\n" + json.dumps(bad).replace("NaN", "NaN") + "\n")
    with pytest.raises(ValueError, match=r"bank.jsonl:2: field 'reward'"):
        read_bank_file(path)
    path.write_text('{"task_id": "x", "task": "t", "reward": 1, "messages": "nope"}\n')
    with pytest.raises(ValueError, match=r":1: field 'messages'"):
        read_bank_file(path)


def _lopd_runtime(tmp_path, **extra):
    from lopd.config import load_config
    from lopd.runtime_build import build_runtime

    overrides = ["model.name=tiny-random", "model.dtype=fp32", "method.name=lopd",
                 "method.latent_tokens=4", "method.num_experiences=2", "method.cold_start_steps=0",
                 "run.threads=1", "run.tensorboard=false", "data.max_train_tasks=40",
                 "method.seed_experiences=12", f"run.out_dir={tmp_path / 'run'}",
                 *[f"{k}={v}" for k, v in extra.items()]]
    config = load_config(None, overrides)
    return build_runtime(config, tmp_path / "run")


def test_bank_file_seeds_the_bank_with_transcripts_for_full_encoder_input(tmp_path):
    rows = [_row(f"t{i}", 1.0) for i in range(4)] + [_row("t9", 0.0)]
    path = _bank_file(tmp_path, rows)
    rt = _lopd_runtime(tmp_path, **{"method.bank_file": path, "method.encoder_input": "full",
                                    "method.bank_min_reward": 1.0})
    assert rt.bank.count() == 4 and rt.transcripts.count() == 4
    (experience,) = rt.retriever.retrieve([("t0", "do t1")], j=1)[0]
    text = rt.provider.experience_text(experience)
    assert "You are a banking agent." in text and "<|im_start|>system" in text
    rt.provider.transcripts = None  # condensed: the trace, not the transcript
    assert "You are a banking agent." not in rt.provider.experience_text(experience)


def test_self_retrieval_switch(tmp_path):
    path = _bank_file(tmp_path, [_row("t0", 1.0), _row("t1", 1.0)])
    rt = _lopd_runtime(tmp_path, **{"method.bank_file": path})
    from lopd.types import Task

    task = Task(id="t0", split="train", domain="file", prompt="do t0")
    found = rt.retriever.retrieve([(task.id, task.prompt)], j=2, exclude_same_task=False)[0]
    assert "t0" in {e.task_id for e in found}
    rt.provider.allow_self = False
    assert rt.provider.retrieve_texts([task], None) == [[rt.provider.experience_text(
        next(e for e in found if e.task_id == "t1"))]]
    rt.provider.allow_self = True
    assert len(rt.provider.retrieve_texts([task], None)[0]) == 2


def test_cold_start_settings_reach_the_cold_start(tmp_path, monkeypatch):
    import lopd.coldstart

    seen = {}
    real = lopd.coldstart.cold_start

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(lopd.coldstart, "cold_start", spy)
    _lopd_runtime(tmp_path, **{"method.cold_start_steps": 1, "method.cold_start_lr": 3e-5,
                               "method.cold_start_batch": 2, "method.cold_start_clip": 30.0,
                               "optim.weight_decay": 0.01})
    assert (seen["lr"], seen["batch_size"], seen["grad_clip"], seen["weight_decay"]) == (
        3e-5, 2, 30.0, 0.01)


@pytest.mark.parametrize("field,value", [
    ("method.latent_placement", "inside"), ("method.latent_scale", "none"),
    ("method.compressor", "perceiver"), ("method.anchor_reduction", "l1"),
    ("method.encoder_input", "raw"), ("method.cold_start_lr", 0),
])
def test_parity_fields_are_validated(field, value):
    from lopd.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=field):
        load_config(None, [f"{field}={value}"])


def test_reference_preset_loads_with_the_authors_choices():
    from pathlib import Path

    from lopd.config import load_config

    config = load_config(Path(__file__).parent.parent / "configs" / "qwen3-4b-reference.yaml")
    m = config.method
    assert (m.latent_placement, m.latent_scale, m.compressor, m.anchor_reduction) == (
        "framed", "layernorm", "shared", "mean")
    assert (config.model.student, config.optim.tasks_per_step, config.optim.group_size) == (
        "full", 32, 1)
    assert (config.rollout.temperature, config.rollout.top_p, config.rollout.top_k) == (
        0.7, 0.95, 20)


def test_checkpoint_every_zero_is_a_config_error():
    from lopd.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="run.checkpoint_every"):
        load_config(None, ["run.checkpoint_every=0"])
