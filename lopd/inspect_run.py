"""`lopd inspect --run DIR --task ID`: open a LOPD run and look inside its teacher for one task.

Rebuilds the run's model, student (newest checkpoint) and composer (newest checkpoint, else
phi_0), retrieves the task's experiences from the run's bank as training would, rolls out one
greedy student episode, and hands everything to ``lopd.inspector.inspect``: which experience
tokens each latent token reads, the nearest vocabulary tokens of each latent vector, and the
per-token privilege delta as a heat map (terminal + ``inspect.html`` + ``inspect.png``).
"""

from __future__ import annotations

from pathlib import Path


def find_task(task_id: str, run_suites: tuple[str, ...] = ()):
    """The task with this id: searched first in the run's own suites (``data.eval_suite``,
    ``data.train_suite``: built-in names, task files or plugins alike), then in the built-in
    suite its id names (tw-/code-/humaneval/bfcl)."""
    from lopd.envs import SUITES, load_suite

    if task_id.startswith("tw-"):
        split = task_id.split("-")[1]
        built_in = [f"toolworld-{split}"]
    else:
        built_in = [s for s in SUITES if not s.startswith("toolworld")]
    searched = list(dict.fromkeys([*run_suites, *built_in]))
    for suite in searched:
        for task in load_suite(suite):
            if task.id == task_id:
                return task
    raise KeyError(f"no task with id {task_id!r} in {', '.join(searched)} "
                   "(ToolWorld ids look like tw-test-banking-3)")


def inspect_run(run_dir: str, task_id: str, out: str = "") -> Path:
    from lopd.checkpoint import latest_checkpoint
    from lopd.config import load_config
    from lopd.generation import HFBackend
    from lopd.inspector import inspect
    from lopd.rollout import RolloutConfig, run_episodes
    from lopd.runtime_build import build_runtime
    from lopd.runtime_store import load_adapter_weights

    run = Path(run_dir)
    config = load_config(run / "config.yaml")
    if config.method.name != "lopd":
        raise ValueError(f"{run} is a {config.method.name} run; inspect needs a LOPD run")
    config.method.cold_start_steps = 0  # never re-run the cold start while inspecting
    rt = build_runtime(config, run)
    checkpoint = latest_checkpoint(run)
    if checkpoint is not None:
        load_adapter_weights(rt.model, checkpoint / "student", "default")
        rt.composer.load(checkpoint / "composer")
    task = find_task(task_id, (config.data.eval_suite, config.data.train_suite))
    experiences = rt.provider.retrieve_texts([task], step=None)[0]
    from lopd.envs import make_env

    backend = HFBackend(rt.model, rt.renderer.stop_ids, rt.pad_id)
    rollout = RolloutConfig(max_steps=config.rollout.max_steps,
                            max_new_tokens=config.rollout.max_new_tokens, temperature=0.0)
    (trajectory,) = run_episodes([make_env(task, max_steps=rollout.max_steps)], backend,
                                 rt.renderer, rollout)
    target = Path(out) if out else run / "inspect" / task_id
    inspect(rt.composer, rt.model, rt.tokenizer, task.prompt, experiences, trajectory,
            out_dir=target, teacher_model=rt.teacher_model, placement=rt.placement)
    print(f"inspector output in {target}")
    return target
