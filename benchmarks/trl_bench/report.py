"""The lopd-vs-TRL results: ``trl_{method}.json`` (everything) and ``trl_{method}.md`` (a table).

Both sides' measurements go side by side with the settings, machine and versions, the lopd/TRL
ratios the issue asks about (step time, CPU time, peak memory) and the differences between the
two setups that remain despite the shared inputs, so that a reader can judge the comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.trl_bench.common import LORA_TARGETS, TRL_INSTALL
from benchmarks.trl_bench.parent import machine, versions

DIFFERENCES = {
    "common": [
        ("Generation: lopd decodes with its own batched KV-cache loop (the 4 identical prompts of a "
        "group are prefilled once; finished rows leave the batch); TRL calls transformers "
        "`model.generate()` on the 16 left-padded prompts (its default path without vLLM). The "
        "samplers use different random streams, so the completions (and their lengths, hence "
        "the work of the update) differ between the sides; tokens generated are reported."),
        ("Training forward: both run the LM head only where a completion token is scored. lopd "
        "gathers the hidden states at the sampled positions and applies the ordinary LM head "
        "(logits (N, V)); TRL GRPO calls the model with completion-only `labels` and "
        "`fused_lm_head=True` (its tiled log-prob + entropy head, `trl.trainer.utils."
        "add_fused_lm_head`); TRL SDFT keeps full logits for the completion window "
        "(`logits_to_keep`), as its full-vocabulary divergence needs them."),
        ("Step boundaries: lopd's step is `Trainer.train_step` (task sampling, rollout + reward, "
        "update, optimizer step); TRL's is `on_step_begin` -> `on_step_end` of `Trainer.train()` "
        "(generation + reward inside the first micro-step, 4 micro-steps, clip, optimizer step, "
        "scheduler step). The batch fetch and logging between TRL steps are outside it; the "
        "interval between consecutive step ends is also recorded in the JSON."),
        ("TRL's time split: `generate` is `GRPOTrainer._generate` / `SDFTTrainer._generate` "
        "(prompt tokenisation, `generate()`, decoding); `update` is the rest of the step."),
        "Peak RSS includes model loading and, for TRL, importing datasets/pandas/pyarrow.",
        ("TRL's dataset is built as `Dataset(InMemoryTable.from_pylist(rows), fingerprint=...)`: "
         "`Dataset.from_list` fails here while fingerprinting the table with dill (datasets "
         "5.2.0, dill 0.4.1, pyarrow 26.0.1: `PicklingError: Can't pickle <class "
         "'MonthDayNano'>`). TRL only indexes the dataset, so this changes nothing else."),
    ],
    "grpo": [
        ("Advantages: both (r - group mean) / (sample std + eps); eps is 1e-6 in lopd, 1e-4 in "
        "TRL."),
        "TRL also computes per-token entropies and more metrics in its loss; lopd does not.",
        ("Rewards are mostly 0 here (the untrained 135M model rarely completes a ToolWorld task "
        "in one turn); both sides still run the full forward/backward of every micro-batch."),
    ],
    "sdft": [
        ("Teacher context placement: lopd inserts the demonstration as a separate user message "
        "after the goal (`Privileged information:` block); TRL's SDFT appends it to the last "
        "user message with its template `{prompt}\\n\\n{privileged_context}`. Same text, a few "
        "tokens of framing differ."),
        ("TRL's SDFT re-tokenises the teacher prompt every step and runs the teacher on "
        "[teacher prompt; completion]; lopd splices the context ids into the student's batch."),
    ],
}


def both_ran(lopd: dict, trl: dict) -> bool:
    return "error" not in lopd and "error" not in trl


def result_record(args, lopd: dict, trl: dict, command: str) -> dict:
    """The JSON result: settings, machine, versions, both sides, differences and (when both
    sides ran) the lopd / TRL ratios."""
    method = args.method
    result = {
        "method": method, "command": command, "machine": machine(), "versions": versions(),
        "trl_install": TRL_INSTALL,
        "settings": {k: getattr(args, k) for k in (
            "model", "steps", "warmup", "prompts", "generations", "micro_batch",
            "max_new_tokens", "threads", "lr")} | {
            "dtype": "fp32", "temperature": 1.0, "lora": {"r": 16, "alpha": 32, "dropout": 0.0,
                                                          "targets": LORA_TARGETS}},
        "lopd": lopd, "trl": trl, "differences": DIFFERENCES["common"] + DIFFERENCES[method],
    }
    if both_ran(lopd, trl):
        result["lopd_over_trl_median_seconds"] = round(
            lopd["summary"]["median_seconds"] / trl["summary"]["median_seconds"], 3)
        result["lopd_over_trl_median_cpu_seconds"] = round(
            lopd["summary"]["median_cpu_seconds"] / trl["summary"]["median_cpu_seconds"], 3)
        result["lopd_over_trl_peak_rss"] = round(lopd["peak_rss_mb"] / trl["peak_rss_mb"], 3)
        result["lopd_over_trl_median_seconds_excluding_generate"] = round(
            lopd["summary"]["median_seconds_excluding_generate"]
            / trl["summary"]["median_seconds_excluding_generate"], 3)
    return result


def intro_lines(args, result: dict, lopd: dict, trl: dict, command: str) -> list[str]:
    """Title, command, machine and load, versions and the shared setup."""
    method = args.method
    lines = [f"# lopd vs TRL: {method.upper()} step time and peak memory", "",
             f"`{command}`", ""]
    m, v = result["machine"], result["versions"]
    lines += [
        (f"Machine: {m['cpu']}, {m['cores']} cores visible, {m['memory']} RAM, shared with "
         "other jobs (the lock only keeps other benchmarks off). Load average (1/5/15 min) "
         f"before/after each side: lopd {lopd.get('load_before')} -> {lopd.get('load_after')}, "
         f"TRL {trl.get('load_before')} -> {trl.get('load_after')}. Other processes used "
         f"{lopd.get('other_processes_cores')} cores on average while lopd ran and "
         f"{trl.get('other_processes_cores')} while TRL ran (machine busy CPU time minus the "
         "side's own, over its wall time)."), "",
        (f"Versions: torch {v['torch']}, transformers {v['transformers']}, peft {v['peft']}, "
        f"accelerate {v['accelerate']}; TRL {v['trl']} with datasets {v['datasets']}, installed "
        f"outside .venv: `{TRL_INSTALL}` (only the TRL child puts `.bench-site` on sys.path)."), "",
        f"Setup: {args.model} (lopd's converted HF dir, the same for both), fp32, "
        f"{args.threads} torch threads, {args.prompts} ToolWorld training prompts x "
        f"{args.generations} completions = {args.prompts * args.generations} per step, at most "
        f"{args.max_new_tokens} new tokens, temperature 1.0, LoRA r=16/alpha=32 on "
        f"q/k/v/o/gate/up/down, lr {args.lr} constant, AdamW, clip 1.0, micro-batches of "
        f"{args.micro_batch} (gradient accumulation, one optimizer step per step). "
        + ("GRPO: no KL term (TRL beta=0), one pass (num_iterations=1), clip 0.2, "
           "loss_type=grpo (per-sequence mean), group std scaling. Reward: one ToolWorld turn "
           "scored by the task checklist (the same env code on both sides)."
           if method == "grpo" else
           "SDFT: teacher = frozen base (LoRA off) + the task's demonstration as text, "
           "generalised JSD beta 0.5 on the full vocabulary (TRL distillation_mode=full_logits)."),
        (f" {args.warmup} warm-up step(s) not counted, then {args.steps} timed; each side in its "
        "own fresh process, back to back (lopd first)."), ""]
    return lines


def comparison_lines(method: str, result: dict, lopd: dict, trl: dict) -> list[str]:
    """The side-by-side table and the lopd / TRL ratios (both sides ran)."""
    trl_name = ("`trl.GRPOTrainer`" if method == "grpo"
                else "`trl.experimental.sdft.SDFTTrainer`")
    ls, ts = lopd["summary"], trl["summary"]
    keys = sorted(set(ls["split_median"]) | set(ts["split_median"]))
    return [
        "| | lopd | TRL |", "|---|---|---|",
        f"| trainer | `lopd.trainer.Trainer` (method {method}) | {trl_name} |",
        f"| s/step, median | **{ls['median_seconds']}** | **{ts['median_seconds']}** |",
        f"| s/step, each | {ls['seconds_each']} | {ts['seconds_each']} |",
        (f"| CPU s/step (process user+sys), median | {ls['median_cpu_seconds']} | "
        f"{ts['median_cpu_seconds']} |"),
        (f"| tokens generated per step | {ls['tokens_generated_each']} | "
        f"{ts['tokens_generated_each']} |"),
        (f"| s per 1k generated tokens, median | {ls['median_seconds_per_1k_tokens']} | "
        f"{ts['median_seconds_per_1k_tokens']} |"),
        *[f"| split: {k} s, median | {ls['split_median'].get(k, '-')} | "
          f"{ts['split_median'].get(k, '-')} |" for k in keys],
        *([(f"| privileged-context tokens per row (teacher only) | "
           f"{[s['privileged_context_tokens'] for s in lopd['steps'] if not s['warmup']]} | "
           f"{[s['privileged_context_tokens'] for s in trl['steps'] if not s['warmup']]} |")]
          if method == "sdft" else []),
        f"| peak RSS MB (process max RSS) | {lopd['peak_rss_mb']} | {trl['peak_rss_mb']} |",
        (f"| setup s (trainer construction) | {lopd['setup_seconds']} | "
        f"{trl['setup_seconds']} |"),
        (f"| warm-up step s | {[s['seconds'] for s in lopd['steps'] if s['warmup']]} | "
        f"{[s['seconds'] for s in trl['steps'] if s['warmup']]} |"), "",
        f"lopd / TRL median step time: **{result['lopd_over_trl_median_seconds']:.2f}x**"
        + (f" (target <= 0.5x: "
           f"{'met' if result['lopd_over_trl_median_seconds'] <= 0.5 else 'not met'})"
           if method == "grpo" else "")
        + f"; CPU time {result['lopd_over_trl_median_cpu_seconds']:.2f}x; peak RSS "
        f"{result['lopd_over_trl_peak_rss']:.2f}x; step time excluding generation "
        f"{result['lopd_over_trl_median_seconds_excluding_generate']:.2f}x "
        f"({ls['median_seconds_excluding_generate']} vs "
        f"{ts['median_seconds_excluding_generate']} s).", ""]


def write_results(args, out_dir: Path, lopd: dict, trl: dict, command: str) -> None:
    """Write ``trl_{method}.json`` and ``trl_{method}.md`` into ``out_dir``; print the latter."""
    method = args.method
    result = result_record(args, lopd, trl, command)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"trl_{method}.json").write_text(json.dumps(result, indent=2))

    lines = intro_lines(args, result, lopd, trl, command)
    if not both_ran(lopd, trl):
        lines += ["**A side failed:**", "", f"- lopd: {lopd.get('error', 'ok')}",
                  f"- TRL: {trl.get('error', 'ok')}", ""]
    else:
        lines += comparison_lines(method, result, lopd, trl)
    lines += ["Remaining differences between the two setups:", "",
              *[f"- {d}" for d in result["differences"]], "",
              f"Per-step details (split, rewards, task ids, threads) are in `trl_{method}.json`.", ""]
    (out_dir / f"trl_{method}.md").write_text("\n".join(lines))
    print("\n".join(lines))
