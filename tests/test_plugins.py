"""Environment plugins by import path: loading, protocol checks, one-line errors, training."""

import textwrap
from pathlib import Path

import pytest
import torch

from lopd.cli import main
from lopd.config import load_config
from lopd.envs import check_references, load_suite, make_env, suite_problem
from lopd.envs.plugins import PluginError, PluginTypeError
from lopd.reference import reference_trajectory

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "todo_service"

PLUGIN = textwrap.dedent(f'''
    """Test plugin: the to-do example's tasks with an explicit env maker, and broken factories."""
    import math

    from lopd.envs.function_env import function_env_maker
    from lopd.envs.plugins import PluginSuite, resolve
    from lopd.types import ResetResult, StepResult, Task


    def todo(split="train"):
        rows = resolve("{EXAMPLE / 'tasks.py'}:suite")(split)
        service = resolve("{EXAMPLE / 'service.py'}:TodoService")
        return PluginSuite(rows, function_env_maker(service))


    class Scripted:
        reward = 0.5

        def __init__(self, task, seed=0, max_steps=30):
            self.task = task

        def reset(self):
            return ResetResult([{{"role": "user", "content": self.task.prompt}}], [])

        def step(self, text):
            return StepResult([], type(self).reward, True, {{}})


    def _tasks():
        return [Task(id=f"s-{{i}}", split="train", domain="s", prompt="hi") for i in range(3)]


    def scripted(reward="0.5"):
        Scripted.reward = float(reward)
        return _tasks(), Scripted


    def returns_dict():
        return {{"tasks": []}}


    def returns_strings():
        return ["a", "b"]


    def no_reset():
        return _tasks(), lambda task: object()


    def bad_reset():
        class Env(Scripted):
            def reset(self):
                return [{{"role": "user", "content": "hi"}}]
        return _tasks(), Env


    def raises():
        raise KeyError("no data")


    def same_ids():
        tasks = _tasks()
        return tasks + tasks[:1], Scripted


    NOT_CALLABLE = 3
''')


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "my_plugin.py"
    path.write_text(PLUGIN)
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    return str(path)


def test_plugin_suite_runs_through_a_checked_env(plugin):
    tasks = load_suite(f"{plugin}:todo:test", n=3)
    assert len(tasks) == 3 and tasks[0].metadata["env"] == "plugin"
    env = make_env(tasks[0], max_steps=5)
    assert type(env).__name__ == "CheckedEnv"
    assert [t["name"] for t in env.reset().tools][:2] == ["list_lists", "find_items"]
    from lopd.chat import ChatRenderer
    from lopd.models import load_tokenizer

    traj = reference_trajectory(tasks[0], ChatRenderer(load_tokenizer("tiny-random")))
    assert traj.reward == 1.0 and traj.success


def test_success_defaults_to_full_reward(plugin):
    (task, *_) = load_suite(f"{plugin}:scripted:1.0")
    env = make_env(task)
    env.reset()
    assert env.step("x").info["success"] is True


def test_module_form_imports_from_the_working_directory(plugin, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert len(load_suite("my_plugin:scripted")) == 3


@pytest.mark.parametrize("attr, kind, words", [
    ("returns_dict", PluginTypeError, "the factory returned a dict"),
    ("returns_strings", PluginTypeError, "task 0 is a str"),
    ("no_reset", PluginTypeError, "without reset() and step()"),
    ("bad_reset", PluginTypeError, "not a lopd.types.ResetResult"),
    ("raises", PluginError, "the factory failed (KeyError: 'no data')"),
    ("same_ids", PluginError, "task id 's-0' appears twice"),
    ("NOT_CALLABLE", PluginTypeError, "not a callable factory"),
    ("missing", PluginError, "has no attribute 'missing'"),
    ("scripted:7", PluginError, "gave reward 7.0"),
])
def test_bad_plugins_give_one_line_errors(plugin, attr, kind, words):
    with pytest.raises(kind) as caught:
        name = f"{plugin}:{attr}"
        tasks = load_suite(name)
        env = make_env(tasks[0])
        env.reset()
        env.step("x")
    message = str(caught.value)
    assert isinstance(caught.value, (ValueError, TypeError))
    assert words in message and "\n" not in message


def test_import_errors_name_the_plugin(plugin, tmp_path):
    with pytest.raises(PluginError, match="importing .*broken.py failed .*ModuleNotFoundError"):
        load_suite(f"{tmp_path / 'broken.py'}:suite")
    with pytest.raises(PluginError, match="cannot import 'no_such_pkg_xyz'"):
        load_suite("no_such_pkg_xyz:suite")


def test_cli_reports_a_bad_plugin_on_one_line(plugin, tmp_path, capsys):
    status = main(["eval", "--model", "tiny-random", "--suite", f"{plugin}:returns_dict",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "the factory returned a dict" in err[0]
    assert not (tmp_path / "out").exists()
    assert suite_problem(f"{plugin}:scripted") is None
    assert "unknown suite" in suite_problem("nope")


def test_methods_that_need_references_name_the_task(plugin):
    tasks = load_suite(f"{plugin}:scripted")
    for method in ("sdft", "opsd"):
        with pytest.raises(ValueError, match=f"method {method} needs a reference .* task 's-0'"):
            check_references(method, tasks, "suite")
    for method in ("lopd", "grpo", "sdpo", "skill-sd"):
        check_references(method, tasks, "suite")


def _config(tmp_path, plugin, method):
    overrides = [
        "model.name=tiny-random", "model.dtype=fp32", f"method.name={method}",
        "optim.steps=2", "optim.tasks_per_step=2", "optim.group_size=2", "optim.micro_batch=2",
        "optim.student_lr=0.01", "optim.composer_lr=0.01", "rollout.max_steps=2",
        "rollout.max_new_tokens=8", f"data.train_suite={plugin}:todo:train",
        f"data.eval_suite={plugin}:todo:test", "data.max_train_tasks=30", "data.eval_tasks=2",
        "method.latent_tokens=4", "method.num_experiences=2", "method.seed_experiences=10",
        "method.cold_start_steps=2", "method.experience_chars=200", "run.threads=1",
        "run.checkpoint_every=10", "run.tensorboard=false", f"run.out_dir={tmp_path / method}",
    ]
    return load_config(None, overrides)


@pytest.mark.parametrize("method", ["lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd"])
def test_every_method_trains_on_a_plugin_env(tmp_path, plugin, method):
    from lopd.trainer import Trainer

    trainer = Trainer(_config(tmp_path, plugin, method))
    rollout = trainer.rt.rollout

    def with_a_success(tasks, step):  # the random model never succeeds: one reference per group
        trajs = rollout(tasks, step)
        seen = set()
        for index, traj in enumerate(trajs):
            if traj.group not in seen:
                seen.add(traj.group)
                trajs[index] = reference_trajectory(traj.task, trainer.rt.renderer)
                trajs[index].group = traj.group
        return trajs

    trainer.rt.rollout = with_a_success
    before = [p.detach().clone() for p in trainer.rt.student_parameters()]
    history = trainer.fit()
    assert len(history) == 2 and sum(row["signal_rows"] for row in history) > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.rt.student_parameters()))
    assert all(t.metadata["env"] == "plugin" for t in trainer.rt.train_tasks)


def test_inspect_finds_a_plugin_task_of_the_run(tmp_path, plugin):
    """`lopd inspect` looks tasks up in the run's own suites, so plugin and task-file tasks work."""
    import argparse

    from lopd.inspect_run import inspect_run
    from lopd.preflight import check_inspect
    from lopd.trainer import Trainer

    config = _config(tmp_path, plugin, "lopd")
    config.optim.steps = 1
    trainer = Trainer(config)
    trainer.fit()
    task_id = trainer.rt.eval_tasks[0].id
    assert not task_id.startswith(("tw-", "code-"))
    check_inspect(argparse.Namespace(run=str(config.run.out_dir), task=task_id, out=""))
    out = inspect_run(str(config.run.out_dir), task_id, str(tmp_path / "view"))
    assert (out / "inspect.html").is_file() and (out / "inspect.json").is_file()
