"""Shared test settings: one torch thread (the machine has 2 cores), cached tiny model, and an
evaluation lock of the tests' own (a test never waits for a real run's evaluation)."""

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# rollout.backend=auto samples with the HF loop here (fast to build, bit-exact resumes); the vLLM
# engine is tested in test_vllm_backend.py, which asks for it by name
os.environ.setdefault("LOPD_VLLM", "0")
os.environ["LOPD_EVAL_LOCK"] = str(Path(tempfile.mkdtemp(prefix="lopd-tests-")) / "evaluation.lock")


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer) of the tiny random Llama with the SmolLM2 tokenizer."""
    from lopd.models import load_model

    return load_model("tiny-random")


@pytest.fixture(scope="session")
def smol_tokenizer():
    from lopd.models import load_tokenizer

    return load_tokenizer("smollm2-135m")
