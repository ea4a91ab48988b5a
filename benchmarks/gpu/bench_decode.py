"""New tokens/s of ``HFBackend`` on a GPU: stepwise decoding (``sync_every=1``: the logits go to
the host and are sampled there at every token, the loop before sync points) against sampling
on the device with one read back every N tokens, and a plain ``model.generate()`` call on the
same prompts (the row users compare with), interleaved in one run.

Shapes: SmolLM2-135M (8 rows: 2 prompts x 4 rollouts) and Qwen3-4B (32 rows: 4 x 8, SmolLM2's
49152-token vocabulary, as in ``prepare.py``), random weights built from their configs (no
downloads, no model files), fp32 weights under bf16 autocast as the trainer runs them. A random
model samples near-uniform tokens, so a random 1/256 of the vocabulary are stop ids: about 40% of
the rows stop before the 128-token budget, at different steps, as rollout turns do.

Checks, reported rather than asserted (bf16 rounding can differ with the batch's make-up):
greedy tokens of every N against N=1 with no early stops (the same batch at every step, so
they should be equal) and with ragged stops; greedy against ``model.generate()`` (fp32, no
autocast, 3 prompts); host synchronisations per decode step (``torch.cuda`` sync debug mode).

    python3 benchmarks/gpu/bench_decode.py --out "$OUT" --profile   # one H200: about 4 minutes
    python3 benchmarks/gpu/bench_decode.py --cpu-smoke --out /tmp/bench-decode   # seconds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from prepare import QWEN3_4B

SMOLLM2_135M = {  # SmolLM2-135M's published architecture
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
    "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "head_dim": 64, "max_position_embeddings": 8192,
    "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
    "hidden_act": "silu", "attention_bias": False, "vocab_size": 49152,
}
TINY = {  # --cpu-smoke only
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 2048, "tie_word_embeddings": False,
    "vocab_size": 512,
}
# name -> (config, prompts, rollouts per prompt, prompt length range, new tokens per call)
SHAPES = {
    "smollm2-135m": (SMOLLM2_135M, 2, 4, (400, 800), 128),
    "qwen3-4b": ({**QWEN3_4B, "vocab_size": 49152}, 4, 8, (400, 800), 128),
    "tiny": (TINY, 2, 2, (20, 40), 16),
}
PAD = 2


def build(config: dict, device: str, dtype: torch.dtype = torch.float32):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = {**config, "bos_token_id": 1, "eos_token_id": PAD, "pad_token_id": PAD}
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=dtype)
    return model.eval()


def make_prompts(vocab: int, groups: int, group_size: int, lengths: tuple[int, int]):
    """``groups`` random prompts of ragged lengths, each repeated ``group_size`` times."""
    g = torch.Generator().manual_seed(1)
    prompts = []
    for _ in range(groups):
        n = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
        prompt = torch.randint(3, vocab, (n,), generator=g).tolist()
        prompts += [prompt] * group_size
    return prompts


def timed(backend, prompts, params, device: str) -> tuple[float, list[list[int]]]:
    backend.reset_prefix_cache()  # every call prefills the same tokens
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    outputs = backend.generate(prompts, params)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, outputs


def syncs_per_step(call, steps: int = 16) -> float | None:
    """Host synchronisations per decode step of ``call(max_new_tokens)``: sync-debug warnings
    of a ``steps``-token call minus those of a 1-token call (prefill, setup), over
    ``steps - 1``."""
    if not torch.cuda.is_available():
        return None
    counts = []
    for n in (1, steps):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                call(n)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts.append(len(caught))
    return (counts[1] - counts[0]) / (steps - 1)


def backend_call(backend, prompts, params):
    """``call(n)`` for ``syncs_per_step``: the backend's ``generate`` with a budget of n."""
    return lambda n: backend.generate(prompts, type(params)(**{**vars(params),
                                                               "max_new_tokens": n}))


def hf_generate(model, prompts, stops: set[int], new_tokens: int, device: str) -> list[list[int]]:
    """A plain ``model.generate()`` call as users write it: the left-padded batch (every row,
    duplicates included), sampling at temperature 1 with top-p and top-k off, the stop ids as
    end-of-sequence ids, the same bf16 autocast as the loop. Outputs are cut after each row's
    first stop id, as the loop's are."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        attention[row, width - len(prompt):] = 1
    autocast = device == "cuda" and next(model.parameters()).dtype == torch.float32
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        out = model.generate(input_ids=ids.to(device), attention_mask=attention.to(device),
                             max_new_tokens=new_tokens, min_new_tokens=1, do_sample=True,
                             temperature=1.0, top_p=1.0, top_k=0,
                             eos_token_id=sorted(stops), pad_token_id=PAD)
    rows = []
    for tokens in out[:, width:].tolist():
        end = next((i for i, t in enumerate(tokens) if t in stops), None)
        rows.append(tokens if end is None else tokens[:end + 1])
    return rows


def generate_call(model, prompts, stops, device):
    """``call(n)`` for ``syncs_per_step``: ``hf_generate`` with a budget of n."""
    return lambda n: hf_generate(model, prompts, stops, n, device)


def timed_generate(model, prompts, stops, new_tokens, device) -> tuple[float, list[list[int]]]:
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    outputs = hf_generate(model, prompts, stops, new_tokens, device)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, outputs


def profile_table(backend, prompts, params, device: str, rows: int = 25) -> str:
    """The ops of one ``generate`` call, by total device time (CPU time on a CPU): where a
    decode step's time goes."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    backend.reset_prefix_cache()
    with profile(activities=activities) as prof:
        backend.generate(prompts, params)
        if device == "cuda":
            torch.cuda.synchronize()
    averages = prof.key_averages()
    host = averages.table(sort_by="self_cpu_time_total", row_limit=rows)
    tables = [f"by self CPU time (host waits show here)\n{host}"]
    if device == "cuda":
        kernels = averages.table(sort_by="self_cuda_time_total", row_limit=rows)
        tables.insert(0, f"by device time\n{kernels}")
    return "\n".join(tables)


def rows_equal(a: list[list[int]], b: list[list[int]]) -> str:
    return f"{sum(x == y for x, y in zip(a, b))}/{len(a)}"


def greedy_checks(model, backends: dict, prompts, new_tokens: int, stops: set[int],
                  device: str) -> dict:
    """Greedy tokens of each N against N=1, without early stops and with ragged ones (stop ids
    taken from the middle of rows' outputs), and against ``model.generate()``."""
    from lopd.generation import HFBackend, SamplingParams

    greedy = SamplingParams(max_new_tokens=new_tokens, temperature=0)
    distinct = list({tuple(p): p for p in prompts}.values())
    base = min(backends)
    no_stop = {n: HFBackend(model, {PAD}, PAD, autocast=device == "cuda", sync_every=n)
               .generate(distinct, greedy) for n in backends}
    ragged = {PAD} | {out[len(out) // (i + 2)] for i, out in enumerate(no_stop[base])}
    stopped = {n: HFBackend(model, ragged, PAD, autocast=device == "cuda", sync_every=n)
               .generate(distinct, greedy) for n in backends}
    result = {f"no early stop, N={n} vs N={base}": rows_equal(no_stop[n], no_stop[base])
              for n in backends if n != base}
    result.update({f"ragged stops, N={n} vs N={base}": rows_equal(stopped[n], stopped[base])
                   for n in backends if n != base})
    result[f"ragged stop lengths (N={base})"] = [len(o) for o in stopped[base]]
    short = distinct[:3]
    budget = min(16, new_tokens)
    with torch.no_grad():
        reference = [model.generate(torch.tensor([p], device=device), max_new_tokens=budget,
                                    do_sample=False, eos_token_id=sorted(stops),
                                    pad_token_id=PAD)[0, len(p):].tolist() for p in short]
    for n in backends:
        fp32 = HFBackend(model, stops, PAD, autocast=False, sync_every=n)
        got = fp32.generate(short, SamplingParams(max_new_tokens=budget, temperature=0))
        result[f"fp32 generate() vs N={n}"] = rows_equal(got, reference)
    return result


def bench_shape(name: str, device: str, syncs: list[int], repeats: int,
                deadline: float, profile_dir: Path | None = None,
                dtype: torch.dtype = torch.float32) -> dict:
    from lopd.generation import HFBackend, SamplingParams

    config, groups, group_size, lengths, new_tokens = SHAPES[name]
    model = build(config, device, dtype)
    prompts = make_prompts(config["vocab_size"], groups, group_size, lengths)
    stops = {PAD} | set(torch.randperm(config["vocab_size"], generator=torch.Generator()
                                       .manual_seed(2))[:config["vocab_size"] // 256].tolist())
    autocast = device == "cuda" and dtype == torch.float32
    backends = {n: HFBackend(model, stops, PAD, autocast=autocast, sync_every=n) for n in syncs}
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0, seed=0)
    for backend in backends.values():  # warm-up: kernels, allocator, cuBLAS handles
        timed(backend, prompts, params, device)
    timed_generate(model, prompts, stops, new_tokens, device)
    runs: dict[int | str, list[dict]] = {n: [] for n in [*syncs, "generate()"]}
    outputs = {}
    for repeat in range(repeats):
        if repeat and time.perf_counter() > deadline:
            break
        for n, backend in backends.items():  # interleaved: drift hits every N alike
            seconds, outputs[n] = timed(backend, prompts, params, device)
            runs[n].append({"seconds": seconds, "tokens": sum(len(o) for o in outputs[n])})
        seconds, plain = timed_generate(model, prompts, stops, new_tokens, device)
        runs["generate()"].append({"seconds": seconds, "tokens": sum(len(o) for o in plain)})
    result = {"rows": len(prompts), "prompt_tokens": sum(len(p) for p in prompts),
              "new_tokens_budget": new_tokens, "stop_ids": len(stops), "sync": {}}
    for n, samples in runs.items():
        rates = [s["tokens"] / s["seconds"] for s in samples]
        call = (backend_call(backends[n], prompts, params) if n in backends else
                generate_call(model, prompts, stops, device))
        result["sync"][n] = {"tokens_per_s": statistics.median(rates), "runs": samples,
                             "syncs_per_step": syncs_per_step(call)}
    if profile_dir is not None:
        table = profile_table(backends[max(syncs)], prompts, params, device)
        (profile_dir / f"profile_{name}.txt").write_text(
            f"HFBackend(sync_every={max(syncs)}), {name}, one generate() call\n{table}\n")
    larger = [n for n in syncs if n > 1]
    result["sampled rows equal across N>1"] = (
        rows_equal(outputs[larger[0]], outputs[larger[-1]]) if len(larger) > 1 else "-")
    result["greedy"] = greedy_checks(model, backends, prompts, new_tokens, stops, device)
    del model, backends
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def markdown(result: dict) -> str:
    lines = ["# Decode throughput: stepwise vs sync points", "",
             f"`{result['command']}`", "",
             (f"{result['device']}; torch {result['torch']}, transformers "
              f"{result['transformers']}; {result['seconds']:.0f} s in all. Random weights, "
              + ("fp32 under bf16 autocast (CUDA)" if result["args"]["dtype"] == "float32"
                 else "bf16, no autocast")
              + ", temperature 1, top-p 1; new tokens/s = sampled tokens / wall time of the "
              "call (prefill included), median of the repeats. `generate()`: a plain "
              "`model.generate()` on the same rows (duplicates prefilled, no prefix cache)."),
             "", "| shape | rows | N (sync_every) | new tokens/s | vs first N | host syncs / step |",
             "|---|---|---|---|---|---|"]
    for name, shape in result["shapes"].items():
        base = next(iter(shape["sync"].values()))["tokens_per_s"]  # the first N
        for n, run in shape["sync"].items():
            syncs = run["syncs_per_step"]
            lines.append(f"| {name} | {shape['rows']} | {n} | {run['tokens_per_s']:.0f} | "
                         f"{run['tokens_per_s'] / base:.2f}x | "
                         f"{'-' if syncs is None else f'{syncs:.2f}'} |")
    lines += ["", "Checks (rows equal / rows):", ""]
    for name, shape in result["shapes"].items():
        checks = {"sampled rows equal across N>1": shape["sampled rows equal across N>1"],
                  **shape["greedy"]}
        lines.append(f"- {name}: " + "; ".join(f"{k}: {v}" for k, v in checks.items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "runs/bench-decode"))
    parser.add_argument("--shapes", nargs="+", default=["smollm2-135m", "qwen3-4b"],
                        choices=sorted(SHAPES))
    parser.add_argument("--sync", nargs="+", type=int, default=[1, 8, 32],
                        help="sync_every values; the first is the baseline")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=240,
                        help="no new repeat round starts after this many seconds")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="weights: float32 runs under bf16 autocast on CUDA (as the trainer "
                             "does), bfloat16 runs without autocast")
    parser.add_argument("--profile", action="store_true",
                        help="also write profile_SHAPE.txt: the ops of one call at the largest N")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="the tiny shape on the CPU, one repeat: checks the script runs")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.shapes, args.sync, args.repeats = ["tiny"], [1, 4, 16], 1
    device = "cuda" if torch.cuda.is_available() and not args.cpu_smoke else "cpu"
    if device == "cpu" and not args.cpu_smoke:
        raise SystemExit("no CUDA device: use --cpu-smoke for a check on the CPU")
    import transformers

    started = time.perf_counter()
    result = {"command": " ".join(["python3", *sys.argv]),
              "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "args": vars(args), "shapes": {}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.shapes:
        result["shapes"][name] = bench_shape(name, device, args.sync, args.repeats,
                                             started + args.budget_s,
                                             out if args.profile else None,
                                             getattr(torch, args.dtype))
        result["seconds"] = time.perf_counter() - started
        (out / "gpu_decode.json").write_text(json.dumps(result, indent=2))  # after every shape
        (out / "gpu_decode.md").write_text(markdown(result))
        print(markdown(result), flush=True)


if __name__ == "__main__":
    main()
