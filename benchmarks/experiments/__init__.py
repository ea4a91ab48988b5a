"""The paper's experiments (section 4) at laptop scale, with a scale knob for GPUs.

    .venv/bin/python -m benchmarks.experiments all --scale laptop      # the whole sweep
    .venv/bin/python -m benchmarks.experiments efficiency --scale laptop --dry-run
    .venv/bin/python -m benchmarks.experiments all --scale quick       # CI smoke test

Experiments (one subcommand each; ``all`` runs them in order, ``report`` only re-renders):

1. ``efficiency``: mean train reward vs rollouts consumed for LOPD, GRPO and Skill-SD at an
   equal budget, every seed; the share of GRPO's (and Skill-SD's) budget LOPD needs to reach
   its final reward.
2. ``methods``: vanilla, GRPO, SDFT, OPSD, SDPO, Skill-SD, LOPD at the same rollout budget ->
   held-out ToolWorld success (+ BFCL multi-turn per category with ``--bfcl``; HumanEval
   pass@1 for the code preset with ``--presets toolworld,code``).
3. ``ablations``: margin m in {0, 0.01, 0.05, 0.1}; K; J; frozen composer; the same retrieved
   experiences as text instead of latent tokens - with teacher-side proxies (privilege Delta,
   beta, held-out teacher NLL) because a laptop budget cannot separate final success.
4. ``behaviour``: tool calls per step, interaction steps, first-response length, reward per
   tool call, held-out, before (vanilla) vs after training.
5. ``cost``: step-time breakdown and peak memory per method.

Modules: ``scales`` (quick / laptop / paper sizes and the cost model), ``plan`` (runs and
configs), ``runner`` (one run: cold-start cache, Trainer, eval, probe, memory), ``analysis``
(numbers), ``records`` (JSON + PNG per experiment), ``plots``, ``report`` and
``conclusions`` (RESULTS.md), ``cli``.
"""
