"""The learning sweep's variants: one shared setting, the named config overrides on top of it.

``SHARED`` holds for every run; a *variant* is a label and its overrides. ``SETTING`` is where
GRPO learns: the method table (one variant per method), the LOPD ablations (the paper's and the
authors' choices, ``ABLATIONS``) and the numerics twins (``-fp32``, ``-bf16``) run at it.
`benchmarks.learning` runs them; `python -m benchmarks.learning list` prints them.
"""

from __future__ import annotations

SHARED = ("optim.tasks_per_step=8", "optim.group_size=4", "optim.one_domain_batches=true",
          "optim.micro_batch=4", "rollout.max_steps=6", "rollout.max_new_tokens=96",
          "rollout.temperature=1.0", "data.eval_tasks=1", "run.tensorboard=false",
          "run.eval_every=0")
"""Every run of the sweep: the throughput issue's fastest step (benchmarks/results/throughput.md)."""

VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpo-lr2e-4": ("GRPO, LoRA lr 2e-4", ("method.name=grpo", "optim.student_lr=2e-4")),
    "grpo-lr5e-4": ("GRPO, LoRA lr 5e-4", ("method.name=grpo", "optim.student_lr=5e-4")),
    "grpo-lr1e-3": ("GRPO, LoRA lr 1e-3", ("method.name=grpo", "optim.student_lr=1e-3")),
    "grpo-lr2e-3": ("GRPO, LoRA lr 2e-3", ("method.name=grpo", "optim.student_lr=2e-3")),
    "grpo-lr1e-3-tier2": ("GRPO, LoRA lr 1e-3, training tasks of tiers 1-2",
                          ("method.name=grpo", "optim.student_lr=1e-3", "data.train_max_tier=2")),
    "grpo-lr2e-3-tier2": ("GRPO, LoRA lr 2e-3, training tasks of tiers 1-2",
                          ("method.name=grpo", "optim.student_lr=2e-3", "data.train_max_tier=2")),
    "grpo-lr1e-3-t0.7": ("GRPO, LoRA lr 1e-3, temperature 0.7",
                         ("method.name=grpo", "optim.student_lr=1e-3", "rollout.temperature=0.7")),
    "grpo-lr1e-3-tier1-g8": (
        "GRPO, LoRA lr 1e-3, tier-1 training tasks, 4 tasks x 8 rollouts, 3 training turns",
        ("method.name=grpo", "optim.student_lr=1e-3", "data.train_max_tier=1",
         "optim.tasks_per_step=4", "optim.group_size=8", "optim.micro_batch=8",
         "rollout.train_max_steps=3")),
    "lopd-lr1e-3-tier1-g8": (
        "LOPD, LoRA lr 1e-3, tier-1 training tasks, 4 tasks x 8 rollouts, 3 training turns",
        ("method.name=lopd", "optim.student_lr=1e-3", "data.train_max_tier=1",
         "optim.tasks_per_step=4", "optim.group_size=8", "optim.micro_batch=4",
         "rollout.train_max_steps=3")),
    "skill-sd-lr1e-3-tier1-g8": (
        "Skill-SD, LoRA lr 1e-3, tier-1 training tasks, 4 tasks x 8 rollouts, 3 training turns",
        ("method.name=skill-sd", "optim.student_lr=1e-3", "data.train_max_tier=1",
         "optim.tasks_per_step=4", "optim.group_size=8", "optim.micro_batch=4",
         "rollout.train_max_steps=3")),
    "lopd-lr1e-3": ("LOPD, LoRA lr 1e-3", ("method.name=lopd", "optim.student_lr=1e-3",
                                           "optim.micro_batch=2")),
    "skill-sd-lr1e-3": ("Skill-SD, LoRA lr 1e-3", ("method.name=skill-sd",
                                                   "optim.student_lr=1e-3")),
}
"""name -> (label, overrides). Add a variant here to sweep it; the report keeps every run."""

SETTING = "lr5e-4-t0.7-tier1-g8"
"""The setting where GRPO learns (learning.md): the method table and the ablations run at it."""
SETTING_LABEL = ("LoRA lr 5e-4, temperature 0.7, tier-1 training tasks, 4 tasks x 8 rollouts, "
                 "3 training turns")
METHOD_LABELS = {"grpo": "GRPO", "lopd": "LOPD", "skill-sd": "Skill-SD", "sdft": "SDFT",
                 "opsd": "OPSD", "sdpo": "SDPO"}
ABLATIONS = {
    "m0": ("m = 0 (no margin)", ("method.margin=0",)),
    "frozen": ("frozen composer (phi = phi_0)", ("method.freeze_composer=true",)),
    "text": ("text context (the same retrieved experiences)", ("method.context=text",)),
    "K8": ("K = 8", ("method.latent_tokens=8",)),
    "J1": ("J = 1", ("method.num_experiences=1",)),
    "framed": ("latents framed inside the first user message (the authors' placement)",
               ("method.latent_placement=framed",)),
    "shared": ("weight-shared resampler compressor (the authors')",
               ("method.compressor=shared",)),
    "self": ("own rows retrievable (the authors' self-retrieval)",
             ("method.allow_self_retrieval=true",)),
}
"""LOPD ablations at ``SETTING``: the paper's (m, composer, context, K, J) and the authors'
choices (REFERENCE.md) as rows."""


def setting_overrides(method: str, lr: str = "5e-4") -> tuple[str, ...]:
    """``method`` at ``SETTING`` (GRPO's rows fit a micro-batch of 8; the teacher methods 4),
    or at another learning rate ``lr``."""
    return (f"method.name={method}", f"optim.student_lr={lr}", "rollout.temperature=0.7",
            "data.train_max_tier=1", "optim.tasks_per_step=4", "optim.group_size=8",
            f"optim.micro_batch={8 if method == 'grpo' else 4}", "rollout.train_max_steps=3")


VARIANTS.update({f"{m}-{SETTING}": (f"{label}, {SETTING_LABEL}", setting_overrides(m))
                 for m, label in METHOD_LABELS.items()})
VARIANTS["sdpo-lr5e-5-t0.7-tier1-g8"] = (
    f"SDPO, {SETTING_LABEL.replace('lr 5e-4', 'lr 5e-5 (a tenth)')}",
    setting_overrides("sdpo", lr="5e-5"))
"""Step-size control for the distillation rows that end below the warm start (RESULTS.md)."""
VARIANTS.update({f"grpo-lr{lr}-t0.7-tier1-g8": (
    f"GRPO, {SETTING_LABEL.replace('lr 5e-4', f'lr {lr}')}", setting_overrides("grpo", lr=lr))
    for lr in ("1e-4", "2e-4")})
"""Step-size controls for GRPO on the rules suites, where its lr-5e-4 run collapsed after four
updates from one-success-in-eight groups (benchmarks/results/rules/README.md)."""
FP32 = "fp32"
"""Suffix of the variants pinned to fp32 (``model.dtype=fp32``). ``dtype auto`` trains in fp32
on a CPU without native bf16 and in bf16 autocast on one with it, so these are the numerics
twins of runs made on the latter: the same seed, so the same tasks (RESULTS.md;
``benchmarks/studies/bench_dtype.py`` measures how far the two numerics move the policy)."""
VARIANTS.update({f"{m}-{SETTING}-{FP32}": (f"{label}, {SETTING_LABEL}, fp32 throughout",
                                           (*setting_overrides(m), "model.dtype=fp32"))
                 for m, label in METHOD_LABELS.items()})
VARIANTS[f"grpo-{SETTING}-bf16"] = (f"GRPO, {SETTING_LABEL}, bf16 autocast",
                                    (*setting_overrides("grpo"), "model.dtype=bf16-autocast"))
"""Numerics control: the same tasks as an fp32 seed, trained in bf16 autocast."""
VARIANTS[f"grpo-{SETTING}-hf"] = (f"GRPO, {SETTING_LABEL}, rollouts on lopd's HF loop",
                                  (*setting_overrides("grpo"), "rollout.backend=hf"))
"""Engine control: the same seed with rollouts sampled by lopd's own decode loop instead of
vLLM (``rollout.backend=auto`` picks vLLM where it is installed)."""
VARIANTS[f"grpo-{SETTING}-{FP32}-vllm"] = (
    f"GRPO, {SETTING_LABEL}, fp32 throughout, rollouts on vLLM",
    (*setting_overrides("grpo"), "model.dtype=fp32", "rollout.backend=vllm"))
"""Its twin: the plain suite's seed 0 was trained in fp32 on the HF loop before vLLM was the
default, so this row, the same seed and numerics on vLLM, shows whether the engine changes what
GRPO learns."""
VARIANTS.update({f"lopd-{SETTING}-{key}": (f"LOPD, {SETTING_LABEL}, {label}",
                                           (*setting_overrides("lopd"), *extra))
                 for key, (label, extra) in ABLATIONS.items()})
VARIANTS.update({f"lopd-{SETTING}-{FP32}-{key}": (f"LOPD, {SETTING_LABEL}, fp32, {label}",
                                                  (*setting_overrides("lopd"), "model.dtype=fp32",
                                                   *extra))
                 for key, (label, extra) in ABLATIONS.items()})
DIVERSE_COLD_START = ("method.cold_start_lr=1e-4", "method.composer_query_std=1.0",
                      "method.cold_start_contrast=1.0")
"""The cold start that keeps the composer's latents apart on the rules suites (the default's
phi_0 collapses to one input-blind vector there: benchmarks/results/rules/README.md)."""
VARIANTS.update({f"lopd-lr2e-4-t0.7-tier1-g8{suffix}": (
    f"LOPD, {SETTING_LABEL.replace('lr 5e-4', 'lr 2e-4')}{label}",
    (*setting_overrides("lopd", lr="2e-4"), *extra))
    for suffix, label, extra in (("", "", ()),
                                 ("-text", ", text context", ("method.context=text",)),
                                 ("-m0", ", m = 0 (no margin)", ("method.margin=0",)),
                                 ("-diverse", ", the diverse cold start", DIVERSE_COLD_START),
                                 ("-diverse-m0", ", the diverse cold start, m = 0 (no margin)",
                                  (*DIVERSE_COLD_START, "method.margin=0")))})
VARIANTS["skill-sd-lr2e-4-t0.7-tier1-g8"] = (
    f"Skill-SD, {SETTING_LABEL.replace('lr 5e-4', 'lr 2e-4')}", setting_overrides("skill-sd", lr="2e-4"))
"""LOPD at GRPO's rules step size (lr 2e-4: lr 5e-4 collapsed GRPO there), latent and text
context and the m = 0 ablation, and Skill-SD at the same step size, for the rules suites from
the experience-reading warm start (benchmarks/results/rules/README.md)."""
