"""Shared test settings: one torch thread (the machine has 2 cores), cached tiny model, an
evaluation lock of the tests' own (a test never waits for a real run's evaluation), and the
order in which ``make test``'s workers take the test files."""

import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# rollout.backend=auto samples with the HF loop here (fast to build, bit-exact resumes); the vLLM
# engine is tested in test_vllm_backend.py and test_vllm_training.py, which ask for it by name
os.environ.setdefault("LOPD_VLLM", "0")
os.environ["LOPD_EVAL_LOCK"] = str(Path(tempfile.mkdtemp(prefix="lopd-tests-")) / "evaluation.lock")


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One torch thread in this process for the whole session, whatever a run's ``run.threads``
    asks (default 2) of ``setup_runtime``: ``make test``'s two workers share two cores, and a
    second thread each oversubscribes them (the quick LOPD demo: 16 s with one, 125 s with two,
    on a busy machine). A thread count changes no result a test checks."""
    import torch

    set_threads = torch.set_num_threads
    set_threads(1)
    torch.set_num_threads = lambda _threads: set_threads(1)
    yield
    torch.set_num_threads = set_threads


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer) of the tiny random Llama with the SmolLM2 tokenizer."""
    from lopd.models import load_model

    return load_model("tiny-random")


@pytest.fixture(scope="session")
def smol_tokenizer():
    from lopd.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


# The longest test files (measured, longest first). ``make test`` runs
# ``-n 2 --dist loadfile --no-loadscope-reorder``: each file stays on one worker (its module
# fixtures are built once) and the workers take the files in the order collected here. Long
# files first, then the others by number of tests (xdist's own order), so that no long file is
# started last and runs on one worker while the other has nothing left to do.
LONG_FIRST = ("test_vllm_backend.py", "test_vllm_training.py", "test_fsdp.py",
              "test_kill_resume.py", "test_hostile_code.py", "test_experiments.py", "test_trainer.py",
              "test_coldstart.py", "test_generation.py", "test_resume.py", "test_distributed.py",
              "test_hostile_tools.py", "test_initial_policy.py", "test_plugins.py",
              "test_demo.py", "test_learning_sweep.py", "test_envs_code.py")


def pytest_collection_modifyitems(config, items):
    """On an xdist worker: long files first, then by number of tests (order within a file kept)."""
    if not hasattr(config, "workerinput"):
        return
    count = Counter(item.path.name for item in items)

    def rank(item):
        name = item.path.name
        return (LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST), -count[name])

    items.sort(key=rank)
