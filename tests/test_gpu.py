"""The trainer on a CUDA device: every method, SFT, evaluation and export on the GPU.

Skipped where torch sees no GPU (CI has none). On a GPU machine these run the same tiny-model
loop as tests/test_trainer.py with ``model.device=cuda`` and bf16 autocast, and check that the
weights, the composer and the batches really live on the GPU.
"""

import pytest
import torch

from lopd.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _gpu_config(tmp_path, method, **extra):
    from test_trainer import _config

    return _config(tmp_path, method, **{"model.device": "cuda", "model.dtype": "auto", **extra})


@pytest.mark.parametrize("method", ["lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd"])
def test_each_method_trains_on_the_gpu(tmp_path, method):
    from test_trainer import _moved, _snapshot, _with_one_success_per_group

    trainer = Trainer(_gpu_config(tmp_path, method))
    assert trainer.rt.device.type == "cuda" and trainer.rt.dtype == "bf16-autocast"
    if method in ("grpo", "sdpo", "skill-sd"):
        _with_one_success_per_group(trainer)
    student = _snapshot(trainer.rt.student_parameters())
    assert all(p.is_cuda for p in student)
    composer = _snapshot(trainer.rt.composer.trainable_parameters()) if trainer.rt.composer else None
    history = trainer.fit()
    assert all(torch.isfinite(torch.tensor(float(row["distill"]))) for row in history)
    assert sum(row["signal_rows"] for row in history) > 0
    assert _moved(student, trainer.rt.student_parameters())
    if method == "lopd":
        assert all(p.is_cuda for p in composer)
        assert _moved(composer, trainer.rt.composer.trainable_parameters())


def test_full_fine_tuning_and_text_context_on_the_gpu(tmp_path):
    for method, extra in (("opsd", {"model.student": "full"}), ("lopd", {"method.context": "text"})):
        trainer = Trainer(_gpu_config(tmp_path / method, method, **extra))
        history = trainer.fit()
        assert sum(row["signal_rows"] for row in history) > 0


def test_resume_on_the_gpu_repeats_the_run_when_deterministic(tmp_path):
    from test_trainer import assert_resume_repeats

    assert_resume_repeats(tmp_path, **{"model.device": "cuda", "run.deterministic": "true"})


def test_sft_and_eval_on_the_gpu(tmp_path):
    from lopd.evaluate import EvalSpec, run_eval
    from lopd.sft import run_sft

    adapter = run_sft(model="tiny-random", out_dir=str(tmp_path / "sft"), steps=2, n_tasks=8,
                      threads=1, device="cuda")
    results = run_eval(EvalSpec("tiny-random", ["toolworld-test"], limit=2,
                                out_dir=str(tmp_path / "eval"), adapter=str(adapter), threads=1,
                                device="cuda", max_new_tokens=8, max_steps=2))
    assert results["toolworld-test"]["n"] == 2
