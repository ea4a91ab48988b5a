"""Run one ``Job``: train with the lopd ``Trainer`` in-process, evaluate, write ``result.json``.

- Resumable: a run whose ``result.json`` exists (same fingerprint) is skipped; one killed
  mid-training continues from its last checkpoint (``Trainer(resume=True)``). Held-out suites
  asked for later (``--bfcl N`` after a sweep without it) are evaluated on the finished run's
  final student and added to its result, without training again.
- Cold-start cache: bank seeding + composer cold start depend only on (seed, K, J, model, ...),
  not on the margin, the composer's freezing or the step budget, so they are computed once
  per key under ``RUNS/_coldstart/KEY`` and copied into every LOPD-family run directory
  (``bank.sqlite`` through SQLite's backup API, ``composer_phi0/``, ``coldstart.json``);
  the Runtime then finds a seeded bank and phi_0 and skips both. A text-context LOPD run
  without a probe does not read phi_0 and seeds its own bank instead. The warm start enters
  the key by its weights' fingerprint.
- Held-out evaluation: greedy, eval seed 0, the same suites and limits for every method
  (``lopd.evaluate``), with the student adapter active.
- Teacher probe (ablations): the teacher's NLL per action token on the cold start's held-out
  examples, with the run's final context (trained composer, phi_0 when frozen, or the text
  block) - a direct read of how informative the privileged context is.
- One evaluation at a time: every held-out evaluation (here and in ``benchmarks.learning``)
  holds ``evaluation_slot()``, a file lock shared by every process on the machine, so runs
  trained in parallel evaluate one after another and peak memory stays one evaluation's (a
  run evaluating 100 episodes at once reached 13 GB; two at once overran a 24 GB machine).
  ``LOPD_EVAL_SLOTS=2`` allows two at once, for runs that evaluate 25 episodes at a time.
- Peak memory: Linux's VmHWM after a reset through ``/proc/self/clear_refs`` (per run even
  in-process); elsewhere ``resource.getrusage`` (the process's peak so far).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import gc
import hashlib
import json
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.experiments.plan import Job
from benchmarks.experiments.scales import REPO

RESULT = "result.json"
_NOT_COLD_START = {  # config fields that do not change bank seeding or the cold start
    "method": ("name", "top_m", "margin", "beta_init", "beta_lr", "anchor_weight",
               "freeze_composer", "context", "jsd_beta", "clip_eps"),
    "data": ("eval_suite", "eval_tasks"),
    "rollout": ("max_new_tokens", "eval_max_new_tokens", "max_context_tokens", "temperature",
                "top_p", "train_max_steps"),
    "run": ("out_dir", "threads", "eval_every", "checkpoint_every", "keep_checkpoints",
            "tensorboard", "deterministic"),
    "model": ("device",),
}


class RunMismatch(RuntimeError):
    """A run directory holds a run with a different configuration."""


# -- memory --------------------------------------------------------------------------------------
def _status_kb(field: str) -> int | None:
    try:
        match = re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text())
    except OSError:
        return None
    return int(match.group(1)) if match else None


class PeakMemory:
    """Peak resident set size from construction on, in MB."""

    def __init__(self):
        try:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.method = "VmHWM (reset at run start)"
        except OSError:
            self.method = "ru_maxrss (process peak)"
        self.start_mb = (_status_kb("VmRSS") or 0) / 1024

    def peak_mb(self) -> float:
        hwm = _status_kb("VmHWM") if self.method.startswith("VmHWM") else None
        if hwm is not None:
            return hwm / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- cold-start cache ----------------------------------------------------------------------------
def adapter_fingerprint(directory: str) -> str:
    """First 12 hex digits of the SHA-256 of a PEFT adapter's weights; "none" without one."""
    if not directory:
        return "none"
    weights = Path(directory) / "adapter_model.safetensors"
    if not weights.exists():
        return "missing"
    return hashlib.sha256(weights.read_bytes()).hexdigest()[:12]


def cache_key(config) -> str:
    """The cold-start cache's directory name: the seed, K, J and a digest of every field that
    changes the seeded bank or phi_0. The warm start (``model.init_adapter``) enters by its
    weights' fingerprint, not its path: the cold start runs on the warm-started backbone."""
    data = config.to_dict()
    data["model"]["init_adapter"] = adapter_fingerprint(config.model.init_adapter)
    for section, names in _NOT_COLD_START.items():
        for name in names:
            data[section].pop(name, None)
    data.pop("optim", None)
    digest = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
    m = config.method
    return f"s{config.run.seed}-K{m.latent_tokens}-J{m.num_experiences}-{digest}"


def cache_ready(root: Path, config) -> bool:
    return (root / cache_key(config) / "cache.json").exists()


def ensure_cache(config, root: Path) -> Path:
    """Seed the bank and cold-start the composer once for this key; returns the directory."""
    from lopd.method_parts import cold_start_examples, held_out_count
    from lopd.runtime_build import build_runtime

    directory = root / cache_key(config)
    if (directory / "cache.json").exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    cfg = copy.deepcopy(config)
    cfg.run.out_dir, cfg.run.tensorboard = str(directory), False
    cfg.method.freeze_composer, cfg.method.context = False, "latent"
    print(f"cold-start cache {directory.name}: seeding the bank, cold-starting the composer",
          flush=True)
    memory, started = PeakMemory(), time.perf_counter()
    rt = build_runtime(cfg, directory)
    seconds = time.perf_counter() - started
    examples = cold_start_examples(rt)
    held = examples[: held_out_count(len(examples))]
    probe = [{"ids": list(e.trajectory.input_ids), "mask": list(e.trajectory.action_mask),
              "prompt_len": e.trajectory.prompt_len, "task_text": e.task_text,
              "experiences": list(e.experiences)} for e in held]
    (directory / "probe.json").write_text(json.dumps(probe))
    rt.bank.close()
    del rt
    gc.collect()
    info = {"key": directory.name, "seconds": round(seconds, 1),
            "peak_rss_mb": round(memory.peak_mb(), 1), "bank_rows": None}
    with sqlite3.connect(directory / "bank.sqlite") as conn:
        info["bank_rows"] = conn.execute("SELECT COUNT(*) FROM experiences").fetchone()[0]
    (directory / "cache.json").write_text(json.dumps(info, indent=2))
    return directory


def seed_from_cache(cache: Path, run_dir: Path) -> None:
    """Copy the seeded bank and phi_0 into a fresh run directory (phi_0 last: its presence
    marks a complete copy)."""
    if (run_dir / "composer_phi0" / "composer.safetensors").exists():
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / "bank.sqlite"
    for stale in run_dir.glob("bank.sqlite*"):
        stale.unlink()
    with sqlite3.connect(cache / "bank.sqlite") as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    shutil.copy2(cache / "coldstart.json", run_dir / "coldstart.json")
    shutil.copytree(cache / "composer_phi0", run_dir / "composer_phi0", dirs_exist_ok=True)


# -- evaluation and probe ------------------------------------------------------------------------
EVAL_LOCK = Path(os.environ.get("LOPD_EVAL_LOCK", "/tmp/lopd-evaluation.lock"))
"""The file whose lock ``evaluation_slot`` holds (``LOPD_EVAL_LOCK`` moves it)."""


EVAL_SLOTS = int(os.environ.get("LOPD_EVAL_SLOTS", "1"))
"""Evaluations the machine runs at once (``LOPD_EVAL_SLOTS``): 1 by default; 2 fits a 24 GB
machine when every process evaluates 25 episodes at a time (2.4 GB each)."""


def _slot_paths(slots: int) -> list[Path]:
    return [EVAL_LOCK] + [EVAL_LOCK.with_name(f"{EVAL_LOCK.name}.{i}") for i in range(1, slots)]


@contextlib.contextmanager
def evaluation_slot(slots: int | None = None):
    """Hold one of the machine's ``slots`` evaluation slots (default ``EVAL_SLOTS``; blocking):
    an exclusive ``flock`` on ``EVAL_LOCK`` or one of its numbered siblings, released when the
    block ends or the process dies."""
    EVAL_LOCK.parent.mkdir(parents=True, exist_ok=True)
    paths, waited = _slot_paths(max(1, slots or EVAL_SLOTS)), False
    while True:
        for path in paths:
            with open(path, "a") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
                return
        if not waited:
            print(f"[runner] waiting for another process's evaluation ({EVAL_LOCK})", flush=True)
            waited = True
        time.sleep(0.5)


def evaluate_suites(rt, suites: dict[str, int | None], seed: int = 0,
                    batch_size: int = 32) -> dict[str, dict]:
    """Greedy held-out evaluation of the run's student on each suite (same limits for all)."""
    from lopd.envs import load_suite
    from lopd.evaluate import evaluate_tasks, summarize
    from lopd.rollout import RolloutConfig

    cfg = rt.config
    rt.model.eval()
    backend = rt.backend()
    window = int(getattr(rt.model.config, "max_position_embeddings", 8192) or 8192)
    out = {}
    for suite, n in suites.items():
        bfcl = suite.startswith("bfcl")  # BFCL caps call-steps per user turn itself (20)
        rollout = RolloutConfig(
            max_steps=400 if bfcl else cfg.rollout.max_steps,
            max_new_tokens=cfg.rollout.max_new_tokens, temperature=0.0,
            max_context_tokens=min(window, 8192) if bfcl else cfg.rollout.max_context_tokens)
        with evaluation_slot():
            started = time.perf_counter()
            trajs = evaluate_tasks(backend, rt.renderer, load_suite(suite, n=n), rollout,
                                   batch_size=batch_size, seed=seed)
        out[suite] = {**summarize(trajs), "seconds": round(time.perf_counter() - started, 1),
                      "max_steps": rollout.max_steps, "max_new_tokens": rollout.max_new_tokens}
    return out


def _probe_examples(cache: Path) -> list:
    from lopd.coldstart import ColdStartExample
    from lopd.types import Task, Trajectory

    rows = json.loads((cache / "probe.json").read_text())
    return [ColdStartExample(Trajectory(Task("", "", "", r["task_text"]), r["ids"], r["mask"],
                                        [], r["prompt_len"], []), r["task_text"], r["experiences"])
            for r in rows]


def text_nll(rt, examples: list, batch_size: int = 4) -> float:
    """Teacher NLL per action token with the experiences as text (``method.context=text``)."""
    import torch

    from lopd.coldstart import collate_examples
    from lopd.runtime import experience_text_message
    from lopd.teacher import pad_context_ids, supervised_targets, teacher_logits

    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = examples[start:start + batch_size]
            batch = collate_examples(chunk, rt.pad_id)
            ids = [rt.renderer.render_message(experience_text_message(e.experiences))[0]
                   for e in chunk]
            context, mask = pad_context_ids(ids, rt.pad_id)
            with rt.autocast():
                logits = teacher_logits(rt.model, batch, context, mask, positions="supervised",
                                        teacher_model=rt.teacher_model)  # (N, V)
            nll = torch.nn.functional.cross_entropy(logits.float(), supervised_targets(batch),
                                                    reduction="none")
            total, count = total + float(nll.sum()), count + nll.numel()
    return total / max(count, 1)


def teacher_probe(rt, cache: Path) -> dict:
    from lopd.coldstart import evaluate_nll

    examples = _probe_examples(cache)
    if not examples:
        return {}
    started = time.perf_counter()
    if rt.config.method.context == "text":
        nll = text_nll(rt, examples)
    else:
        rt.composer.eval()
        nll = evaluate_nll(rt.composer, rt.model, examples, True, 4, rt.teacher_model,
                           rt.dtype)
    return {"examples": len(examples), "nll_context_after": nll,
            "seconds": round(time.perf_counter() - started, 1)}


# -- one run ---------------------------------------------------------------------------------------
def load_result(job: Job) -> dict | None:
    """The finished run's result, None if not finished; raises on a different configuration."""
    path = Path(job.run_dir) / RESULT
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if _trained_fingerprint(result) != job.fingerprint:
        raise RunMismatch(f"{job.run_dir} holds a run with another configuration; delete it or "
                          f"pass another --runs directory")
    return result


def _trained_fingerprint(result: dict) -> str:
    """The fingerprint of the training a result comes from. Results written before the held-out
    suites left the fingerprint read it from the run's ``job.json``."""
    if "eval_spec" in result:
        return result["fingerprint"]
    saved = Path(result["run_dir"]) / "job.json"
    return Job.from_json(json.loads(saved.read_text())).fingerprint if saved.exists() else ""


def missing_evals(job: Job, result: dict) -> dict[str, int | None]:
    """Suites (and task counts) the job asks for that the finished run was not evaluated on."""
    done = result.get("eval_spec")
    if done is None:  # an older result: its job.json holds the suites it ran
        saved = Path(result["run_dir"]) / "job.json"
        done = json.loads(saved.read_text())["evals"] if saved.exists() else {}
    return {suite: n for suite, n in job.evals.items()
            if suite not in result.get("eval", {}) or done.get(suite, -1) != n}


def add_evals(job: Job, result: dict, suites: dict[str, int | None]) -> dict:
    """Evaluate a finished run's final student on more suites; rewrite its ``result.json``."""
    from lopd.checkpoint import latest_checkpoint
    from lopd.config import load_config
    from lopd.trainer import Trainer

    started = time.perf_counter()
    config = load_config(job.base, job.overrides)
    trainer = Trainer(config, resume=latest_checkpoint(Path(job.run_dir)) is not None)
    evals = evaluate_suites(trainer.rt, suites, batch_size=job.eval_batch)
    _close(trainer)
    done = result.get("eval_spec") or {s: n for s, n in job.evals.items() if s in result["eval"]}
    result = {**result, "eval": {**result.get("eval", {}), **evals},
              "eval_spec": {**done, **suites}, "fingerprint": job.fingerprint}
    timing = result.setdefault("timing", {})
    timing["added_eval_s"] = round(timing.get("added_eval_s", 0.0)
                                   + time.perf_counter() - started, 1)
    _write_result(Path(job.run_dir), result)
    return result


def _write_result(run_dir: Path, result: dict) -> None:
    tmp = run_dir / (RESULT + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(run_dir / RESULT)


def _claim(job: Job) -> None:
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "job.json"
    if path.exists() and Job.from_json(json.loads(path.read_text())).fingerprint != job.fingerprint:
        raise RunMismatch(f"{run_dir} holds an unfinished run with another configuration; "
                          f"delete it or pass another --runs directory")
    path.write_text(json.dumps(job.to_json(), indent=2))


def run_one(job: Job) -> dict:
    """Train (or resume), evaluate, probe; write and return ``result.json``."""
    from lopd.checkpoint import latest_checkpoint
    from lopd.config import load_config
    from lopd.trainer import Trainer

    _claim(job)
    config = load_config(job.base, job.overrides)
    run_dir = Path(job.run_dir)
    started = time.perf_counter()
    cache = None
    # text context never reads phi_0: without a probe (which reads the cache's held-out
    # examples) such a run seeds its own bank and skips the cold start
    if config.method.name == "lopd" and (config.method.context != "text" or job.probe):
        cache = ensure_cache(config, Path(job.cache_root))
        seed_from_cache(cache, run_dir)
    cache_s = time.perf_counter() - started
    memory = PeakMemory()
    resumed = latest_checkpoint(run_dir) is not None
    trainer = Trainer(config, resume=resumed)
    setup_s = time.perf_counter() - started - cache_s
    trainer.fit()
    train_s = time.perf_counter() - started - cache_s - setup_s
    evals = evaluate_suites(trainer.rt, job.evals, batch_size=job.eval_batch) if job.evals else {}
    eval_s = time.perf_counter() - started - cache_s - setup_s - train_s
    probe = teacher_probe(trainer.rt, cache) if job.probe and cache is not None else {}
    result = _result(job, config, trainer, evals, probe, cache, memory, resumed, {
        "cache_s": cache_s, "setup_s": setup_s, "train_s": train_s, "eval_s": eval_s,
        "wall_s": time.perf_counter() - started})
    _close(trainer)
    _write_result(run_dir, result)
    return result


def _result(job, config, trainer, evals, probe, cache, memory, resumed, timing) -> dict:
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines() if line] \
        if trainer.metrics_path.exists() else []
    coldstart = Path(job.run_dir) / "coldstart.json"
    cache_info = json.loads((cache / "cache.json").read_text()) if cache is not None else None
    return {
        "key": job.key, "name": job.name, "method": job.method, "seed": job.seed,
        "fingerprint": job.fingerprint, "run_dir": job.run_dir, "config": config.to_dict(),
        "metrics": [r for r in rows if "reward" in r], "eval": evals, "eval_spec": job.evals,
        "probe": probe,
        "coldstart": json.loads(coldstart.read_text()) if coldstart.exists() else None,
        "cache": cache_info, "resumed": resumed,
        "timing": {k: round(v, 1) for k, v in timing.items()},
        "peak_rss_mb": round(memory.peak_mb(), 1), "rss_start_mb": round(memory.start_mb, 1),
        "peak_rss_method": memory.method, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _close(trainer) -> None:
    for bank in (trainer.rt.bank, getattr(trainer.rt.skills, "bank", None)):
        if bank is not None:
            bank.close()
    del trainer
    gc.collect()


def exit_with_parent(poll_s: float = 2.0) -> threading.Thread:
    """End this process when the process that started it is gone (a killed sweep must not
    leave its run training on alone: a restarted sweep would then run it twice at once).
    Checkpoints are written atomically, so stopping between two of them loses no finished step."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        print("[run] the sweep that started this run is gone; stopping", file=sys.stderr, flush=True)
        os._exit(143)

    watcher = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    watcher.start()
    return watcher


def run_isolated(job: Job) -> None:
    """``run_one`` in a fresh Python process (``python -m benchmarks.experiments _run JOB``)."""
    _claim(job)
    path = Path(job.run_dir) / "job.json"
    subprocess.run([sys.executable, "-m", "benchmarks.experiments", "_run", str(path)],
                   cwd=REPO, check=True)


def execute(jobs: list[Job], isolate: bool) -> dict[str, dict]:
    """Run every job not finished yet, in order; returns key -> result for all of them."""
    results: dict[str, dict] = {}
    todo = [job for job in jobs if load_result(job) is None]
    for index, job in enumerate(todo, 1):
        print(f"[run {index}/{len(todo)}] {job.key} -> {job.run_dir}", flush=True)
        started = time.perf_counter()
        if isolate:
            run_isolated(job)
        else:
            run_one(job)
        print(f"[run {index}/{len(todo)}] {job.key} done in {time.perf_counter() - started:.0f} s",
              flush=True)
    for job in jobs:
        result = load_result(job)
        extra = missing_evals(job, result)
        if extra:
            print(f"[eval] {job.key}: adding {', '.join(extra)} to the finished run", flush=True)
            result = add_evals(job, result, extra)
        results[job.key] = result
    return results
