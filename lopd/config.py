"""Typed run configuration: one dataclass per concern, YAML in, CLI overrides, fail-fast checks.

Every field carries a docstring (the string literal under it); ``lopd train --help-config``
prints them. A config is loaded from YAML (``load_config``), then ``section.field=value``
overrides are applied (values parsed as YAML scalars), then ``validate`` rejects bad values
with the field named. The resolved config is written to every run directory.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lopd.rollout import RolloutConfig

METHODS = ("lopd", "grpo", "sdft", "opsd", "sdpo", "skill-sd")


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field."""


@dataclass
class ModelConfig:
    name: str = "smollm2-135m"
    """Backbone: smollm2-135m (embedded default), tiny-random (tests) or a local HF directory."""
    dtype: str = "auto"
    """auto (bf16-autocast where bf16 is fast: GPU, AVX-512 BF16, AMX; else fp32) | fp32 |
    bf16 (bf16 weights) | bf16-autocast (fp32 weights, bf16 matmuls)."""
    device: str = "auto"
    """auto (this process's GPU where CUDA is available, else the CPU) | cpu | cuda | cuda:N.
    Under `accelerate launch`, plain cuda means cuda:$LOCAL_RANK."""
    student: str = "lora"
    """lora: the student is a LoRA adapter on the frozen base (the base is the teacher);
    full: full fine-tuning with a separate frozen teacher copy."""
    lora_r: int = 16
    """LoRA rank of the student adapter."""
    lora_alpha: int = 32
    """LoRA scaling numerator of the student adapter."""
    init_adapter: str = ""
    """Optional PEFT LoRA directory (any rank, alpha, target modules; e.g. the `lopd sft`
    output) merged into the base weights at load: the warm-started model is the initial policy
    theta_bar, so the teacher, the composer's encoder, the cold start and the student (LoRA or
    full) all start from it (paper eq. 8). `lopd eval --run`, `lopd export` and `lopd inspect`
    merge it the same way."""


@dataclass
class DataConfig:
    train_suite: str = "toolworld-train"
    """Task suite sampled for training: a built-in name (toolworld-train, code-train, ...), a
    JSONL task file (path/to/tasks.jsonl: one task per line naming its tools as a Python
    import path, lopd.envs.taskfile), or a plugin `module:factory` / `file.py:factory[:ARG]`
    returning tasks and an environment maker (lopd.envs.plugins). Rewards: LOPD's A = 2r - 1
    and GRPO's group advantages both use the episode reward r in [0, 1] (partial credit);
    binary success decides what joins the experience bank and is the eval headline."""
    eval_suite: str = "toolworld-test"
    """Held-out suite for periodic evaluation (same forms as train_suite)."""
    eval_tasks: int = 32
    """Tasks of the eval suite used by periodic evaluation (0 = all)."""
    eval_max_tier: int = 0
    """Evaluate only on held-out tasks whose ``tier`` is at most this (see ``train_max_tier``;
    0 = every tier), before ``eval_tasks`` takes the first N."""
    eval_batch: int = 32
    """Held-out episodes generated together. Larger batches can be faster on a CPU (200
    ToolWorld tasks on 2 AMX cores: 448 s at 100, 716 s at 32 in a run that shared the CPU for
    a few minutes; not yet measured cleanly) but hold more KV cache; greedy results depend on
    it only through bf16 rounding."""
    max_train_tasks: int = 0
    """Cap on the training pool (0 = the whole suite)."""
    train_max_tier: int = 0
    """Train only on tasks whose ``tier`` (task metadata; ToolWorld's difficulty, 1-5) is at
    most this; tasks without a tier stay. 0 = every tier. A task the policy never solves gives
    every rollout of its group the same reward, hence no GRPO signal. The held-out suite has
    its own cap (``eval_max_tier``)."""


@dataclass
class MethodConfig:
    name: str = "lopd"
    """lopd | grpo | sdft | opsd | sdpo | skill-sd."""
    top_m: int = 20
    """M: teacher top-M tokens plus one tail bucket in the distillation loss (eq. 9)."""
    num_experiences: int = 3
    """J: experiences retrieved per task (the paper's 3, used with 4-8B backbones). With the
    135M SmolLM2 preset, J = 1 did better on two seeds (benchmarks/RESULTS.md, the J ablation)."""
    latent_tokens: int = 32
    """K: latent tokens per experience (J*K enter the teacher)."""
    composer_layers: int = 2
    """Layers of the QFormer-style compressor."""
    composer_lora_r: int = 8
    """LoRA rank of the composer's encoder adapter (psi)."""
    margin: float = 0.05
    """m: privileged margin the dual variable enforces (eq. 13)."""
    beta_init: float = 0.0
    """Initial dual variable beta."""
    beta_lr: float = 0.5
    """eta_beta: dual ascent step size."""
    anchor_weight: float = 0.01
    """lambda: weight of ||c_phi - sg(c_phi0)||^2."""
    freeze_composer: bool = False
    """Ablation: keep phi fixed at phi_0 after the cold start."""
    context: str = "latent"
    """LOPD's teacher context: latent (the composed latent tokens) | text (ablation: the same J
    retrieved experiences as a text block; the composer is then unused)."""
    seed_experiences: int = 200
    """The bank starts with the reference solutions of this many training tasks (source=seed)."""
    cold_start_steps: int = 30
    """Composer cold-start steps on successful trajectories before joint training."""
    jsd_beta: float = 0.5
    """Mixing coefficient of the generalised JSD (SDFT, OPSD, SDPO)."""
    clip_eps: float = 0.2
    """GRPO ratio clip."""
    advantage_std: bool = True
    """GRPO: divide each group's mean-centred rewards by the group's std (DeepSeekMath, TRL's
    default); false keeps them mean-centred only (Dr. GRPO; TRL ``scale_rewards="none"``), so a
    group with one success in eight no longer weighs that success about 2.5x."""
    experience_chars: int = 600
    """Experience text is cut to this many characters before encoding or text injection
    (condensed traces; `encoder_input=full` is cut by `encoder_max_tokens` instead)."""
    latent_placement: str = "after_prompt"
    """Where the J*K latents enter the teacher's input. after_prompt (lopd, the paper's
    [s ; c]): bare vectors right after the first user message. framed (the authors' code):
    inside the first user message before the task text, between a sentence saying a reference
    example of another task follows and one closing it (lopd.framing)."""
    latent_scale: str = "embedding_norm"
    """Scale of each latent vector. embedding_norm (lopd): rescaled to the mean L2 norm of the
    backbone's embedding rows, so only directions are learned. layernorm (the authors' code):
    LayerNorm of the output projection, used as is."""
    compressor: str = "independent"
    """Compressor architecture. independent (lopd): `composer_layers` blocks with their own
    weights, each [self-attention, cross-attention to the encoder states, MLP]. shared (the
    authors' code): a Perceiver-style resampler, one weight-shared [attention over (encoder
    states ; latents), bias-free MLP] block applied `composer_layers` times (theirs: 8),
    queries initialised randn / sqrt(d)."""
    anchor_reduction: str = "sum"
    """Anchor ||c - sg(c0)||^2 reduction. sum (paper eq. 13: squared L2 norm over the J*K x d
    values of a context) | mean (the authors' code: element-wise mean; they use lambda 0.2)."""
    encoder_input: str = "condensed"
    """What the composer's encoder reads of each retrieved experience. condensed (lopd, the
    paper): the task text plus the action->result trace with verbose observations cut.
    full (the authors' code): the whole chat rendering of the stored trajectory (system
    prompt, every turn), cut at `encoder_max_tokens`; rows without stored messages fall back to
    their condensed trace."""
    encoder_max_tokens: int = 512
    """Token budget of one rendered (task, experience) encoder input (the authors do not cut;
    on a CPU the encoder's cost grows with it)."""
    cold_start_lr: float = 1e-3
    """Learning rate of the composer cold start (the authors: 1e-5 over 1,000 steps)."""
    cold_start_batch: int = 4
    """Examples per cold-start step (the authors: 8)."""
    cold_start_clip: float = 1.0
    """Gradient-norm clip of the cold start, 0 = off (the authors: 30 for the compressor, 3
    for the encoder LoRA)."""
    cold_start_contrast: float = 0.0
    """Weight of the cold start's contrastive term: a hinge that asks the teacher's NLL of a
    trajectory to be at least `cold_start_contrast_margin` lower with the latents of its own
    experiences than with another example's. 0 = off (the paper's plain NLL). Without it a
    cold start can lower the NLL with a latent context that ignores its input (a learned soft
    prompt); `coldstart.json` reports that as `heldout_nll_shuffled_context` ~
    `heldout_nll_context` and a `latent_diversity` across experiences near 1."""
    cold_start_contrast_margin: float = 0.05
    """The hinge's margin, nats per action token (mean over each trajectory's tokens)."""
    composer_query_std: float = 0.02
    """Standard deviation of the compressor's initial learned queries (independent compressor;
    the shared one uses 1 / sqrt(d)). At 0.02 the K queries are so small against the
    cross-attention output that the K latents of one experience start almost equal (mean
    cosine 0.99 on SmolLM2); 1.0 (Flamingo's resampler) starts them apart (0.16)."""
    bank_file: str = ""
    """Optional JSONL of trajectories that seeds the experience bank instead of the reference
    solutions: one object per line with task_id, task (text), reward and messages (the chat
    transcript); `domain` optional. Rows below `bank_min_reward` are skipped."""
    bank_min_reward: float = 1.0
    """Rows of `bank_file` with a lower reward are not loaded (the authors keep every row:
    0; the paper's bank holds successful trajectories only: 1)."""
    allow_self_retrieval: bool = False
    """Let a task retrieve its own past trajectories. Off (lopd, the paper): a task's own rows
    are excluded, so the teacher cannot be handed the answer to the very task it scores, and
    the cold start cannot learn to copy. On: the authors' code."""


@dataclass
class OptimConfig:
    steps: int = 20
    """Training steps (each: sample tasks, roll out, update)."""
    tasks_per_step: int = 4
    """Tasks sampled per step."""
    group_size: int = 4
    """G: rollouts per task."""
    student_lr: float = 1e-4
    """Learning rate of the student."""
    composer_lr: float = 1e-4
    """Learning rate of the composer (phi)."""
    weight_decay: float = 0.0
    """AdamW weight decay (both groups)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (0 = off)."""
    micro_batch: int = 4
    """Trajectories per forward/backward (gradient accumulation over the step's batch)."""
    length_sorted: bool = True
    """Cut micro-batches from the step's rows in order of (task group, length), so that rows of
    similar length share a forward and less of it is padding. The same rows, so the same
    gradients up to float summation order (tested); a task's rollouts stay together, so
    ``share_prefix`` still runs each task prompt once per micro-batch
    (benchmarks/results/update_order.md)."""
    trim_after_last_action: bool = True
    """Training forwards stop at each row's last action token: an episode cut at its turn limit
    ends with an observation that no supervised logit depends on (causal model), so skipping it
    changes no loss (tested) and saves its forward and backward."""
    one_domain_batches: bool = False
    """Draw each step's tasks from one domain (a random one per step, from the (seed, step)
    stream) instead of from the whole pool. A domain's tasks share its system prompt (tool
    descriptions, about 340 of about 600 prompt tokens), which generation then prefills once
    for every rollout of the step (``lopd.generation``)."""
    share_prefix: str = "auto"
    """true: re-scoring forwards run each distinct [prompt ; context] of a micro-batch once and
    share its KV across the rollouts of that task (exact; ``lopd.prefix``); keep a task's
    rollouts in one micro-batch (micro_batch a multiple of group_size) to get the most from it.
    auto: true on CPUs, where it saves FLOPs (1.8x faster LOPD re-scoring here), false on GPUs,
    where the extra segment launches cost more than they save (benchmarks/results/step_time*)."""
    composer_recompute: bool = True
    """LOPD: compose the step's latent context without an autograd graph and run the composer
    again, with its graph, only for its own backward (after the micro-batches). Keeps the
    encoder's activations out of the update loop's peak memory for one extra encoder forward
    (benchmarks/results/memory.md); false keeps the graph from the compose phase on."""
    composer_chunk: int = 2
    """LOPD with ``composer_recompute``: tasks per chunk of the composer's own backward. Each
    chunk of tasks is composed again with its graph and back-propagated before the next, so
    the encoder's activations, the largest part of LOPD's peak memory at many tasks per step,
    stay those of ``composer_chunk`` tasks (0 = all of the step's tasks at once). Gradients
    are the same up to float rounding (tested)."""
    activation_checkpointing: bool = False
    """Keep only each decoder layer's input in the forwards that backpropagate (student,
    teacher, composer encoder, cold start) and replay the layer in the backward, under the adapter
    state it first ran with: less memory for about one more forward. On this 2-core CPU it
    lowered LOPD's update peak from 9.8 to 7.7 GB at 1.64x the update time, a worse trade than
    a smaller ``micro_batch`` (benchmarks/results/memory_checkpointing.md). Training forwards then run without shared prefixes (a checkpointed layer
    keeps no KV cache; ``lopd.prefix.layers_replay``)."""


@dataclass
class RunConfig:
    out_dir: str = "runs/default"
    """Run directory: config, metrics, checkpoints, bank, reports."""
    seed: int = 0
    """Seed for task sampling, rollouts and initialisation."""
    threads: int = 2
    """torch CPU threads (oversubscription slows steps sharply; see DESIGN.md)."""
    keep_freed_memory: bool = True
    """Linux/glibc: keep the memory the process frees for its next allocations instead of
    handing it back to the OS and faulting it in again (``lopd.allocator``). Resident memory
    then stays near its peak after a step; false returns it."""
    deterministic: bool = False
    """Use torch's deterministic kernels (and a fixed cuBLAS workspace), so that a resumed GPU
    run repeats the uninterrupted one; CPU runs already do. Slower on GPUs."""
    eval_every: int = 0
    """Evaluate on the held-out suite every N steps (0 = only at the end)."""
    checkpoint_every: int = 5
    """Checkpoint every N steps (and at the end)."""
    keep_checkpoints: int = 2
    """Keep the last N checkpoints."""
    tensorboard: bool = True
    """Also write metrics as TensorBoard events."""


@dataclass
class DistConfig:
    strategy: str = "auto"
    """How `accelerate launch` processes share the work. ddp: each holds the whole model and
    optimiser state, gradients averaged (lopd.distributed). fsdp: full fine-tuning
    (model.student=full) with the student, its optimiser state and the frozen teacher copy
    sharded across processes, fp32 master weights and bf16 compute on GPUs (lopd.fsdp; needs
    optim.tasks_per_step a multiple of the processes). auto: fsdp when launched with an
    accelerate FSDP config (configs/accelerate/8gpu-full-fsdp.yaml), else ddp. See
    docs/sharding.md."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)
    dist: DistConfig = field(default_factory=DistConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _coerce(value: Any, current: Any, name: str) -> Any:
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if isinstance(current, int) and not isinstance(current, bool):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if isinstance(current, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if isinstance(current, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


def apply(config: Config, values: dict[str, Any], prefix: str = "") -> Config:
    """Set nested values ``{"section": {"field": v}}`` on ``config``; unknown keys are errors."""
    for section_name, section_values in values.items():
        section = getattr(config, section_name, None)
        if section is None or not dataclasses.is_dataclass(section):
            raise ConfigError(f"unknown config section '{prefix}{section_name}' "
                              f"(sections: {', '.join(f.name for f in dataclasses.fields(config))})")
        if not isinstance(section_values, dict):
            raise ConfigError(f"config section '{section_name}' must be a mapping")
        known = {f.name for f in dataclasses.fields(section)}
        for key, value in section_values.items():
            if key not in known:
                raise ConfigError(f"unknown field '{section_name}.{key}' (fields: {', '.join(sorted(known))})")
            full = f"{section_name}.{key}"
            setattr(section, key, _coerce(value, getattr(section, key), full))
    return config


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["optim.steps=4", "method.name=grpo"]`` -> nested dict (values parsed as YAML)."""
    nested: dict[str, Any] = {}
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(f"override {item!r} must look like section.field=value")
        key, raw = item.split("=", 1)
        section, name = key.split(".", 1)
        nested.setdefault(section, {})[name] = yaml.safe_load(raw) if raw else ""
    return nested


def _valid_device(name: str) -> bool:
    kind, _, index = str(name).partition(":")
    if kind in ("auto", "cpu"):
        return not index
    return kind == "cuda" and (not index or index.isdigit())


def validate(config: Config) -> Config:
    """Reject values that cannot work, naming the field."""
    checks = [
        (config.method.name in METHODS, "method.name", f"one of {', '.join(METHODS)}"),
        (config.model.dtype in ("auto", "fp32", "bf16", "bf16-autocast"), "model.dtype",
         "auto, fp32, bf16 or bf16-autocast"),
        (_valid_device(config.model.device), "model.device", "auto, cpu, cuda or cuda:N"),
        (config.model.student in ("lora", "full"), "model.student", "lora or full"),
        (config.model.lora_r > 0, "model.lora_r", "> 0"),
        (config.data.train_max_tier >= 0, "data.train_max_tier", ">= 0 (0 = every tier)"),
        (config.data.eval_max_tier >= 0, "data.eval_max_tier", ">= 0 (0 = every tier)"),
        (config.data.eval_batch >= 1, "data.eval_batch", ">= 1"),
        (config.method.top_m >= 1, "method.top_m", ">= 1"),
        (config.method.num_experiences >= 1, "method.num_experiences", ">= 1"),
        (config.method.latent_tokens >= 1, "method.latent_tokens", ">= 1"),
        (config.method.margin >= 0, "method.margin", ">= 0"),
        (config.method.context in ("latent", "text"), "method.context", "latent or text"),
        (config.method.latent_placement in ("after_prompt", "framed"),
         "method.latent_placement", "after_prompt or framed"),
        (config.method.latent_scale in ("embedding_norm", "layernorm"), "method.latent_scale",
         "embedding_norm or layernorm"),
        (config.method.compressor in ("independent", "shared"), "method.compressor",
         "independent or shared"),
        (config.method.anchor_reduction in ("sum", "mean"), "method.anchor_reduction",
         "sum or mean"),
        (config.method.encoder_input in ("condensed", "full"), "method.encoder_input",
         "condensed or full"),
        (config.method.encoder_max_tokens >= 16, "method.encoder_max_tokens", ">= 16"),
        (config.method.composer_layers >= 1, "method.composer_layers", ">= 1"),
        (config.method.cold_start_lr > 0, "method.cold_start_lr", "> 0"),
        (config.method.cold_start_batch >= 1, "method.cold_start_batch", ">= 1"),
        (config.method.cold_start_clip >= 0, "method.cold_start_clip", ">= 0"),
        (config.method.cold_start_contrast >= 0, "method.cold_start_contrast", ">= 0"),
        (config.method.cold_start_contrast_margin >= 0, "method.cold_start_contrast_margin",
         ">= 0"),
        (config.method.composer_query_std > 0, "method.composer_query_std", "> 0"),
        (config.method.beta_lr >= 0, "method.beta_lr", ">= 0"),
        (config.method.anchor_weight >= 0, "method.anchor_weight", ">= 0"),
        (0 <= config.method.jsd_beta <= 1, "method.jsd_beta", "in [0, 1]"),
        (config.optim.steps >= 0, "optim.steps", ">= 0"),
        (config.optim.tasks_per_step >= 1, "optim.tasks_per_step", ">= 1"),
        (config.optim.group_size >= 1, "optim.group_size", ">= 1"),
        (config.optim.group_size >= 2 or config.method.name != "grpo", "optim.group_size",
         ">= 2 for grpo (advantages are group-normalised)"),
        (config.optim.student_lr > 0, "optim.student_lr", "> 0"),
        (config.optim.micro_batch >= 1, "optim.micro_batch", ">= 1"),
        (config.optim.composer_chunk >= 0, "optim.composer_chunk", ">= 0"),
        (config.optim.share_prefix in ("auto", "true", "false"), "optim.share_prefix",
         "auto, true or false"),
        (config.rollout.max_steps >= 1, "rollout.max_steps", ">= 1"),
        (config.rollout.train_max_steps >= 0, "rollout.train_max_steps", ">= 0 (0 = max_steps)"),
        (config.rollout.max_new_tokens >= 1, "rollout.max_new_tokens", ">= 1"),
        (config.rollout.max_calls_per_turn >= 1, "rollout.max_calls_per_turn", ">= 1"),
        (config.rollout.eval_max_new_tokens >= 0, "rollout.eval_max_new_tokens",
         ">= 0 (0 = max_new_tokens)"),
        (config.rollout.temperature >= 0, "rollout.temperature", ">= 0"),
        (0 < config.rollout.top_p <= 1, "rollout.top_p", "in (0, 1]"),
        (config.rollout.backend in ("auto", "hf", "vllm"), "rollout.backend", "auto, hf or vllm"),
        (config.rollout.vllm_kv_cache_gb > 0, "rollout.vllm_kv_cache_gb", "> 0"),
        (config.rollout.importance_cap >= 0, "rollout.importance_cap", ">= 0 (0 = off)"),
        (config.run.threads >= 1, "run.threads", ">= 1"),
        (config.run.keep_checkpoints >= 1, "run.keep_checkpoints", ">= 1"),
        (config.run.checkpoint_every >= 1, "run.checkpoint_every", ">= 1"),
        (config.run.eval_every >= 0, "run.eval_every", ">= 0"),
        (config.dist.strategy in ("auto", "ddp", "fsdp"), "dist.strategy", "auto, ddp or fsdp"),
        (config.dist.strategy != "fsdp" or config.model.student == "full", "model.student",
         "full with dist.strategy=fsdp (a LoRA student runs with dist.strategy=ddp)"),
        (config.dist.strategy != "fsdp" or config.optim.composer_recompute,
         "optim.composer_recompute", "true with dist.strategy=fsdp"),
    ]
    for ok, name, expected in checks:
        if not ok:
            section, key = name.split(".")
            raise ConfigError(f"{name} must be {expected}, got {getattr(getattr(config, section), key)!r}")
    return config


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file <- overrides, validated. A file that cannot be read or parsed, or
    an override value that is not YAML, raises ``ConfigError`` saying which and what to do."""
    config = Config()
    if path:
        apply(config, _read_yaml(Path(path)))
    try:
        nested = parse_overrides(overrides or [])
    except yaml.YAMLError as error:
        raise ConfigError(f"an override value is not valid YAML ({_yaml_problem(error)}); "
                          "quote it or fix it") from None
    apply(config, nested)
    return validate(config)


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(error, 'problem', None) or 'parse error'}{where}"


def _read_yaml(path: Path) -> dict:
    """The top-level mapping of a YAML config file."""
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist; pass an existing YAML file "
                          "(presets are in configs/)")
    if path.is_dir():
        raise ConfigError(f"config path {path} is a directory; pass a YAML file")
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file; pass a YAML config") from None
    except OSError as error:
        raise ConfigError(f"cannot read {path} ({error.strerror}); check its permissions") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML ({_yaml_problem(error)}); fix the "
                          "file") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections "
                          "(model:, method:, optim:, ...)")
    for section, fields in values.items():
        names = [section, *(fields if isinstance(fields, dict) else [])]
        if not all(isinstance(name, str) for name in names):
            raise ConfigError(f"{path}: section and field names must be words, got "
                              f"{next(n for n in names if not isinstance(n, str))!r}")
    return values


def save_config(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))


def field_docs(section_type: type) -> dict[str, str]:
    """Field docstrings of a config dataclass (the string literal under each field)."""
    tree = ast.parse(inspect.getsource(section_type))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())  # type: ignore[union-attr]
    return docs


def describe() -> str:
    """Every field with its default and docstring, for `--help-config`."""
    lines = []
    for section in dataclasses.fields(Config):
        section_type = section.default_factory  # type: ignore[misc]
        docs = field_docs(section_type)
        lines.append(f"[{section.name}]")
        for f in dataclasses.fields(section_type):
            default = getattr(section_type(), f.name)
            lines.append(f"  {section.name}.{f.name} = {default!r}\n      {docs.get(f.name, '')}")
    return "\n".join(lines)
