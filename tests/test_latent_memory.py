"""Latent-memory evaluation and sampled evaluation (``lopd eval --latent-memory / --samples``)."""

import torch

from lopd.generation import HFBackend, SamplingParams
from lopd.latent_memory import LatentMemoryBackend


def _prompts(tokenizer, n=3):
    from lopd.chat import ChatRenderer
    from lopd.envs import load_suite
    from lopd.latent_memory import initial_prompt_ids

    renderer = ChatRenderer(tokenizer)
    tasks = load_suite("toolworld-test", n=n)
    return renderer, [initial_prompt_ids(t, renderer, 2) + renderer.generation_prompt()
                      for t in tasks]


def test_without_latents_it_decodes_like_the_plain_backend(tiny):
    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer)
    prompts[1] = prompts[1][:-7] + prompts[1][-3:]  # rows of different lengths
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    plain = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id, prefix_cache=False)
    from lopd.framing import LatentPlacement

    memory = LatentMemoryBackend(model, renderer.stop_ids, tokenizer.pad_token_id,
                                 LatentPlacement.build("after_prompt", tokenizer))
    assert memory.generate(prompts, params) == plain.generate(prompts, params)


def test_latents_are_spliced_where_training_puts_them(tiny):
    """The first generated token is the argmax of the teacher's training-time forward with the
    same latents at the same place."""
    from lopd.batch import TokenBatch
    from lopd.framing import LatentPlacement
    from lopd.teacher import teacher_logits

    model, tokenizer = tiny
    renderer, prompts = _prompts(tokenizer, n=1)
    (prompt,) = prompts
    header = renderer.generation_prompt()
    latent = torch.randn(6, model.config.hidden_size) * 5
    mask = torch.tensor([True] * 4 + [False] * 2)
    for mode in ("after_prompt", "framed"):
        placement = LatentPlacement.build(mode, tokenizer)
        memory = LatentMemoryBackend(model, renderer.stop_ids, tokenizer.pad_token_id, placement)
        memory.register(prompt[:-len(header)], latent, mask)
        (tokens,) = memory.generate([prompt], SamplingParams(max_new_tokens=1, temperature=0.0))
        ids = torch.tensor([prompt + [0]])
        batch = TokenBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool),
                           torch.tensor([len(prompt) - len(header)]))
        placed, context, context_mask = placement.place(batch, latent[None], mask[None],
                                                        model.get_input_embeddings())
        with torch.no_grad():
            logits = teacher_logits(model, placed, context, context_mask)  # (1, T, V)
        assert tokens[0] == int(logits[0, len(prompt) - 1].argmax())


def test_pass_at_k_counts_tasks_with_any_success():
    from lopd.evaluate import pass_at_k
    from lopd.types import Task, Trajectory

    def traj(task_id, success):
        return Trajectory(Task(task_id, "test", "d", "p"), [], [], [], 0, [], success=success)

    trajs = [traj("a", False), traj("a", True), traj("b", False), traj("b", False)]
    assert pass_at_k(trajs) == 0.5


def test_latent_memory_and_sampled_eval_on_a_lopd_run(tmp_path):
    import json

    from lopd.config import load_config
    from lopd.evaluate import EvalSpec, run_eval
    from lopd.trainer import Trainer

    run = tmp_path / "run"
    config = load_config(None, [
        "model.name=tiny-random", "model.dtype=fp32", "method.name=lopd", "optim.steps=1",
        "optim.tasks_per_step=2", "optim.group_size=2", "optim.micro_batch=2",
        "rollout.max_steps=2", "rollout.max_new_tokens=6", "data.max_train_tasks=40",
        "method.latent_tokens=4", "method.num_experiences=2", "method.seed_experiences=12",
        "method.cold_start_steps=1", "method.latent_placement=framed", "run.threads=1",
        "run.tensorboard=false", f"run.out_dir={run}"])
    trainer = Trainer(config)
    trainer.fit()
    trainer.checkpoint()
    results = run_eval(EvalSpec(run=str(run), latent_memory=True, limit=2, max_steps=2,
                                max_new_tokens=4, threads=1, out_dir=str(tmp_path / "mem")))
    assert results["toolworld-test"]["n"] == 2
    sampled = run_eval(EvalSpec(run=str(run), limit=2, max_steps=2, max_new_tokens=4, threads=1,
                                samples=3, temperature=0.7, top_p=0.95, top_k=20,
                                out_dir=str(tmp_path / "sampled")))
    assert sampled["toolworld-test"]["n"] == 6
    assert "pass_at_k" in sampled["toolworld-test"]
    meta = json.loads((tmp_path / "sampled" / "eval.json").read_text())["meta"]
    assert meta["samples"] == 3 and meta["top_k"] == 20
