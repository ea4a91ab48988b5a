"""The inspector produces its views and files on the tiny model."""

import io

import numpy as np
import torch
from rich.console import Console

from lopd.chat import ChatRenderer
from lopd.composer import Composer, ComposerConfig
from lopd.inspector import inspect
from lopd.models import LoraSpec, add_adapter, load_model
from lopd.types import Task, Trajectory

K = 4


def two_turn_trajectory(tokenizer) -> Trajectory:
    renderer = ChatRenderer(tokenizer)
    messages = [
        {"role": "user", "content": "Find the code of box 3."},
        {"role": "assistant", "content": '<tool_call>{"name": "open", "arguments": {}}</tool_call>'},
        {"role": "tool", "content": "opened"},
        {"role": "assistant", "content": "The code is maple."},
    ]
    prompt, _ = renderer.render(messages[:1])
    ids, mask = renderer.render(messages)
    task = Task(id="t3", split="train", domain="codes", prompt=messages[0]["content"])
    return Trajectory(task, ids, mask, [], len(prompt), messages, 1.0, True)


def test_inspect_writes_views_with_right_shapes(tmp_path):
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-random")
    model = add_adapter(model, "student", LoraSpec(r=4))
    composer = Composer(model, tokenizer, ComposerConfig(num_queries=K, n_layers=1,
                                                         lora=LoraSpec(r=4)))
    experiences = ["Box 3 was opened with code maple.", "The printer is on floor 2 next to box 9."]
    trajectory = two_turn_trajectory(tokenizer)
    buffer = io.StringIO()
    report = inspect(composer, model, tokenizer, "Find the code of box 3.", experiences,
                     trajectory, out_dir=tmp_path, console=Console(file=buffer, width=120))

    for key in ("html", "png", "json"):
        assert report.files[key].is_file() and report.files[key].stat().st_size > 0
    html = report.files["html"].read_text()
    assert "background:rgb(" in html and "maple" in html
    assert "privilege delta" in buffer.getvalue()

    assert len(report.reads) == len(experiences) * K
    assert all(len(read.nearest) == 5 and read.top_tokens for read in report.reads)
    for j, weights in enumerate(report.attention):
        assert weights.shape == (K, len(report.pair_tokens[j]))
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)

    n = len(trajectory.input_ids) - 1
    assert report.deltas.shape == (n,) and len(report.tokens) == n
    supervised = np.asarray(trajectory.action_mask[1:], dtype=bool)
    assert np.isfinite(report.deltas[supervised]).all()
    assert np.isnan(report.deltas[~supervised]).all()
    np.testing.assert_allclose(report.deltas[supervised],
                               (report.teacher_logp - report.student_logp)[supervised], atol=1e-6)
    assert np.isfinite(report.mean_delta)
