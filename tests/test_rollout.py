"""The rollout engine batches episodes, keeps exact ids and masks, and never crashes on output."""

from lopd.chat import ChatRenderer
from lopd.generation import HFBackend
from lopd.rollout import RolloutConfig, make_group_envs, run_episodes
from lopd.types import ResetResult, StepResult, Task


class CountingEnv:
    """Answers every turn with a tool message; ends after `turns` turns with reward 0.5."""

    def __init__(self, task, seed=0, max_steps=30):
        self.task, self.turns, self.calls = task, int(task.metadata["turns"]), 0

    def reset(self):
        return ResetResult([{"role": "system", "content": "Count."},
                            {"role": "user", "content": self.task.prompt}], [])

    def step(self, text):
        self.calls += 1
        if self.calls >= self.turns:
            return StepResult([], 0.5, True, {"tool_calls": self.calls, "success": False})
        return StepResult([{"role": "tool", "content": f"ok {self.calls}"}], 0.0, False,
                          {"tool_calls": self.calls})


def _tasks():
    return [Task(f"t{i}", "test", "count", f"count to {i}", metadata={"turns": i}) for i in (1, 2, 3)]


def _run(tiny, envs, groups=None, **overrides):
    model, tokenizer = tiny
    renderer = ChatRenderer(tokenizer)
    backend = HFBackend(model, renderer.stop_ids, tokenizer.pad_token_id)
    config = RolloutConfig(max_new_tokens=6, temperature=0, **overrides)
    return renderer, run_episodes(envs, backend, renderer, config, seed=0, groups=groups)


def test_trajectories_hold_exact_ids_masks_and_spans(tiny):
    renderer, trajs = _run(tiny, [CountingEnv(t) for t in _tasks()])
    for traj, turns in zip(trajs, (1, 2, 3)):
        assert len(traj.turn_spans) == turns and traj.reward == 0.5
        assert len(traj.input_ids) == len(traj.action_mask)
        covered = sum(end - start for start, end in traj.turn_spans)
        assert sum(traj.action_mask) == covered
        for start, end in traj.turn_spans:
            assert all(traj.action_mask[start:end]) and 0 < end - start <= 6
        prompt_ids, _ = renderer.render(traj.messages[:2])
        assert traj.input_ids[: traj.prompt_len] == prompt_ids
        assert traj.stats["interaction_steps"] == turns


def test_batched_rollouts_equal_one_at_a_time(tiny):
    _, together = _run(tiny, [CountingEnv(t) for t in _tasks()])
    alone = [_run(tiny, [CountingEnv(t)])[1][0] for t in _tasks()]
    assert [t.input_ids for t in together] == [t.input_ids for t in alone]


def test_step_cap_and_context_budget_truncate(tiny):
    task = Task("long", "test", "count", "count", metadata={"turns": 50})
    _, (capped,) = _run(tiny, [CountingEnv(task)], max_steps=4)
    assert len(capped.turn_spans) == 4 and capped.stats["truncated"] == 1 and capped.reward == 0
    _, (cut,) = _run(tiny, [CountingEnv(task)], max_context_tokens=120)
    assert len(cut.input_ids) <= 120 and cut.stats["truncated"] == 1
    _, (unstarted,) = _run(tiny, [CountingEnv(task)], max_context_tokens=20)
    assert unstarted.turn_spans == [] and unstarted.stats["truncated"] == 1


def test_groups_label_rollouts_of_the_same_task(tiny):
    envs, groups = make_group_envs(_tasks()[:2], 3, CountingEnv, max_steps=5)
    _, trajs = _run(tiny, envs, groups)
    assert [t.group for t in trajs] == [0, 0, 0, 1, 1, 1]
    assert [t.task.id for t in trajs] == ["t1"] * 3 + ["t2"] * 3


def test_one_domain_batches_are_deterministic_and_come_from_one_domain():
    from types import SimpleNamespace

    from lopd.config import Config
    from lopd.trainer import Trainer

    pool = [Task(f"{d}{i}", "train", d, "p") for d in ("a", "b", "c") for i in range(6)]
    config = Config()
    config.optim.tasks_per_step = 4
    owner = SimpleNamespace(config=config, rt=SimpleNamespace(train_tasks=pool))
    mixed = [Trainer.sample_tasks(owner, step) for step in range(8)]
    config.optim.one_domain_batches = True
    batches = [Trainer.sample_tasks(owner, step) for step in range(8)]
    assert [Trainer.sample_tasks(owner, step) for step in range(8)] == batches  # (seed, step)
    assert all(len(b) == 4 and len({t.domain for t in b}) == 1 for b in batches)
    assert len({b[0].domain for b in batches}) > 1  # the domain changes from step to step
    assert any(len({t.domain for t in b}) > 1 for b in mixed)  # off: tasks mix domains
    config.run.seed = 1
    assert [Trainer.sample_tasks(owner, step) for step in range(8)] != batches


def test_step_tasks_is_the_trainers_stream():
    from types import SimpleNamespace

    from lopd.config import Config
    from lopd.trainer import Trainer, step_tasks

    pool = [Task(f"{d}{i}", "train", d, "p") for d in ("a", "b", "c") for i in range(6)]
    config = Config()
    config.run.seed = 3
    owner = SimpleNamespace(config=config, rt=SimpleNamespace(train_tasks=pool))
    for one_domain in (False, True):
        config.optim.one_domain_batches = one_domain
        assert [step_tasks(pool, 3, s, config.optim.tasks_per_step, one_domain) for s in range(5)] == \
            [Trainer.sample_tasks(owner, s) for s in range(5)]
    assert len(step_tasks(pool, 0, 0, 40, False)) == len(pool)  # capped at the pool


class CappedEnv(CountingEnv):
    """Ends at its own turn cap with a passing final state, the agent still calling."""

    def step(self, text):
        self.calls += 1
        if self.calls >= self.turns:
            return StepResult([], 1.0, True, {"success": True, "truncated": True})
        return StepResult([{"role": "tool", "content": "ok"}], 0.0, False, {})


def test_score_truncated_off_scores_an_episode_cut_by_the_cap_zero(tiny):
    task = Task("capped", "test", "count", "count", metadata={"turns": 2})
    _, (kept,) = _run(tiny, [CappedEnv(task)])
    assert (kept.reward, kept.success) == (1.0, True)  # the default: the final state's score
    _, (zeroed,) = _run(tiny, [CappedEnv(task)], score_truncated=False)
    assert (zeroed.reward, zeroed.success) == (0.0, False)
    _, (ended,) = _run(tiny, [CountingEnv(Task("e", "test", "count", "c", metadata={"turns": 2}))],
                       score_truncated=False)
    assert ended.reward == 0.5  # an episode the agent ended keeps its score
