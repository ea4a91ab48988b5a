"""Fully sharded data parallelism (torch FSDP2) for full fine-tuning: ``dist.strategy=fsdp``.

Under data parallelism (``lopd.distributed``) every process holds the whole student, its AdamW
moments and, for full fine-tuning, a whole frozen teacher copy. With ``dist.strategy=fsdp`` (or
``auto`` under ``accelerate launch`` with an FSDP config) each of N processes holds 1/N of the
student's weights, gradients and optimiser state, and 1/N of the teacher copy (which has no
optimiser state). torch's ``fully_shard`` does the sharding; this module picks the units and
keeps lopd's loop in step with it.

Units. lopd calls a model's parts, not its ``forward``: the input embedding, the decoder body on
``inputs_embeds``, the LM head at selected positions (``lopd.teacher``). So every part that is
called is a unit: each decoder layer; the decoder body (its final norm); the input embedding and
the LM head as one group (they may be one tied matrix); and the whole model as the root, which
owns nothing and runs one one-token forward so that FSDP knows the tree. The composer's LoRA
adapters on the teacher copy stay out of it (``ignored_params``): phi is replicated and its
gradients are averaged by hand, as under DDP.

Precision. Sharded parameters stay in the weights' dtype (fp32 for ``fp32`` and
``bf16-autocast``: fp32 master weights, AdamW updates them); with ``bf16-autocast`` (the GPU
default) the gathered copies that compute are bf16 and gradients are reduced in fp32.

Lockstep. Every gather and every gradient reduce-scatter is a collective, so all processes must
run the same sharded forwards and backwards in the same order:

- equal shares: ``optim.tasks_per_step`` must be a multiple of the number of processes;
- every process runs every micro-batch's forward and backward; a zero term keeps the student
  (and a differentiable teacher) in the graph of a micro-batch without signal
  (``lopd.trainer``); no shared-prefix forwards (their number of segments depends on the data);
- phases whose forwards depend on the data run on whole weights gathered once, with no
  collective inside (``gathered``): rollouts and evaluation (the student); composing the latent
  context and the composer's backward (the teacher copy). During those phases that one model is
  whole in its compute dtype, as under DDP.

Checkpoints. Every process writes its shards of the student (``student/``) and of its optimiser
state (``student_optim/``) with ``torch.distributed.checkpoint``; resume reads them back in place.
``lopd export`` and ``lopd eval --run`` build the plain model in one process and read the shards
into it (``load_sharded_policy``): the result is an ordinary HF model directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import torch

from lopd import distributed

STRATEGIES = ("auto", "ddp", "fsdp")
OPTIM_PART = "student_optim"


def launched_with_fsdp() -> bool:
    """True under ``accelerate launch`` with an FSDP config (``distributed_type: FSDP``)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"


def resolve_strategy(strategy: str) -> str:
    """``dist.strategy`` resolved: ``auto`` is fsdp under an accelerate FSDP launch of more than
    one process, else ddp (plain data parallelism, or a single process)."""
    if strategy == "auto":
        return "fsdp" if launched_with_fsdp() and distributed.world()[1] > 1 else "ddp"
    return strategy


def check(config) -> None:
    """Fail fast, naming the field, where a run cannot be sharded."""
    from lopd.config import ConfigError

    size = distributed.world()[1]
    how = "dist.strategy=fsdp" if config.dist.strategy == "fsdp" else \
        "dist.strategy=auto under an accelerate FSDP config"
    if config.model.student != "full":
        raise ConfigError(f"model.student must be full with {how}, got "
                          f"{config.model.student!r}: a LoRA student runs data-parallel "
                          "(dist.strategy=ddp, configs/accelerate/8gpu-lora.yaml)")
    if not config.optim.composer_recompute:
        raise ConfigError(f"optim.composer_recompute must be true with {how}: the composer's "
                          "graph cannot outlive the gathered teacher")
    if size < 2:
        raise ConfigError(f"{how} needs at least 2 processes (accelerate launch "
                          "--num_processes N); one process trains with dist.strategy=ddp")
    if config.optim.tasks_per_step % size:
        raise ConfigError(f"optim.tasks_per_step must be a multiple of the {size} processes "
                          f"with {how}, got {config.optim.tasks_per_step}")


def precision_policy(dtype: str, device: torch.device):
    """FSDP mixed precision for a ``model.dtype`` setting: bf16 compute on fp32 master weights
    (gradients reduced in fp32) for ``bf16-autocast``; the weights' own dtype otherwise."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from lopd.models import resolve_dtype

    if resolve_dtype(dtype, device) == "bf16-autocast":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def shard_model(model, mesh, policy, ignored: Iterable[torch.nn.Parameter] = ()) -> None:
    """``fully_shard`` a causal LM (or a PeftModel around one) unit by unit, in place (see the
    module docstring); ``ignored`` parameters stay whole on every process."""
    from torch.distributed.fsdp import fully_shard

    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = causal.get_decoder()
    options = {"mesh": mesh, "mp_policy": policy, "ignored_params": set(ignored)}
    for layer in body.layers:
        fully_shard(layer, **options)
    fully_shard([causal.get_input_embeddings(), causal.get_output_embeddings()], **options)
    fully_shard(body, **options)
    fully_shard(causal, **options)
    device = next(causal.parameters()).device
    with torch.no_grad():  # the root's first forward: FSDP's lazy initialisation of the tree
        causal(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=False)


def shard_runtime(rt) -> None:
    """Shard the student and the frozen teacher copy of a built ``Runtime`` (before its
    optimiser is made, so AdamW's moments are sharded too)."""
    from torch.distributed.device_mesh import init_device_mesh

    check(rt.config)
    device = rt.device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    mesh = init_device_mesh(device.type, (distributed.world()[1],))
    policy = precision_policy(rt.config.model.dtype, device)
    shard_model(rt.model, mesh, policy)
    if rt.teacher_model is not None:
        composer = [p for n, p in rt.teacher_model.named_parameters() if "lora_" in n]
        shard_model(rt.teacher_model, mesh, policy, ignored=composer)
    rt.sharded = True


def _units(models) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for model in models if model is not None for m in model.modules()
            if isinstance(m, FSDPModule)]


@contextmanager
def gathered(*models):
    """Every unit of ``models`` unsharded for the block and kept so (no collective inside, so
    each process may run forwards of its own), then sharded again. Called by all processes."""
    units = _units(models)
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
        unit.set_reshard_after_backward(False, recurse=False)  # a later forward needs them
    try:
        yield
    finally:
        for unit in units:
            unit.set_reshard_after_forward(True, recurse=False)
            unit.set_reshard_after_backward(True, recurse=False)
            unit.reshard()


def full_state(model) -> dict[str, torch.Tensor]:
    """The whole state dict of a sharded model on the CPU, on every process (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, broadcast_from_rank0=False)
    return get_model_state_dict(model, options=options)


# -- checkpoints -------------------------------------------------------------------------------
def save_student(model, optimizer, checkpoint: Path) -> None:
    """Every process writes its shards of the student and its optimiser state (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, moments = get_state_dict(model, optimizer)
    dcp.save(weights, checkpoint_id=checkpoint / "student")
    dcp.save(moments, checkpoint_id=checkpoint / OPTIM_PART)


def load_student(model, optimizer, checkpoint: Path) -> None:
    """Read the shards ``save_student`` wrote back into the sharded student and optimiser."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    weights, moments = get_state_dict(model, optimizer)
    dcp.load(weights, checkpoint_id=checkpoint / "student")
    dcp.load(moments, checkpoint_id=checkpoint / OPTIM_PART)
    set_state_dict(model, optimizer, model_state_dict=weights, optim_state_dict=moments)


def is_sharded_dir(directory: str | Path) -> bool:
    """True for a student directory written by ``save_student`` (a DCP directory)."""
    return (Path(directory) / ".metadata").is_file()


def load_sharded_policy(model_config: dict, directory: Path, dtype: str = "fp32",
                        device: str = "cpu"):
    """``(model, tokenizer)``: a sharded run's student as a plain model, in one process. The
    run's model (warm start merged, as in training) gives the architecture; the shards give
    every weight."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from lopd.models import load_model, resolve_device, torch_dtype

    model, tokenizer = load_model(model_config["name"], dtype="fp32", device="cpu",
                                  init_adapter=model_config.get("init_adapter", ""))
    state = get_model_state_dict(model)
    dcp.load(state, checkpoint_id=directory)
    set_model_state_dict(model, state)
    target = resolve_device(device)
    return model.to(device=target, dtype=torch_dtype(dtype, target)).eval(), tokenizer
