"""Which runs each experiment needs, their exact configs (``Job``), and the planned wall time.

A run is one ``lopd`` training run (or the untrained "vanilla" evaluation), identified by
``group/name-sSEED`` and kept in ``RUNS/group/name-sSEED``. Experiments share runs: the
efficiency runs (LOPD, GRPO, Skill-SD, every seed) are also the method table's rows, the
behaviour table's "after" and the cost table's measurements, so each is trained once.

Equal budget: every efficiency / method-table run has the same steps x tasks_per_step x
group_size; every ablation run the same (smaller) budget.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.experiments.scales import REPO, Scale

EFFICIENCY_METHODS = ("lopd", "grpo", "skill-sd")
OTHER_METHODS = ("sdft", "opsd", "sdpo")
TABLE_ORDER = ("vanilla", "grpo", "sdft", "opsd", "sdpo", "skill-sd", "lopd")
LABELS = {"vanilla": "vanilla", "grpo": "GRPO", "sdft": "SDFT", "opsd": "OPSD",
          "sdpo": "SDPO", "skill-sd": "Skill-SD", "lopd": "LOPD"}
EXPERIMENTS = ("efficiency", "methods", "ablations", "behaviour", "cost")


@dataclass(frozen=True)
class RunSpec:
    name: str
    """Row name: a method, ``vanilla`` or an ablation variant."""
    group: str
    """Run family (directory): toolworld | code | ablations."""
    preset: str
    method: str
    seed: int
    steps: int
    overrides: tuple[str, ...] = ()
    evaluate: bool = True
    probe: bool = False
    label: str = ""

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}-s{self.seed}"


@dataclass
class Settings:
    """A scale plus the command line's choices."""

    scale: Scale
    seeds: tuple[int, ...]
    steps: int
    ablation_steps: int
    runs_root: Path
    out: Path
    report: Path
    init_adapter: str
    model: str = ""
    bfcl: int = 0
    humaneval: int = 0
    presets: tuple[str, ...] = ("toolworld",)
    isolate: bool = False
    ablation_eval: bool = False
    only: frozenset[str] = frozenset()
    extra: tuple[str, ...] = ()
    argv: tuple[str, ...] = field(default_factory=tuple)


def identity_overrides(overrides: list[str]) -> list[str]:
    """The overrides that make two runs the same run (not where they ran, nor with how many
    threads)."""
    return [o for o in overrides if not o.startswith(("run.out_dir=", "run.threads="))]


@dataclass
class Job:
    """Everything one run needs, JSON-serialisable (it is handed to a subprocess as is)."""

    key: str
    name: str
    method: str
    seed: int
    run_dir: str
    base: str
    overrides: list[str]
    evals: dict[str, int | None]
    probe: bool
    cache_root: str
    eval_batch: int = 32
    """Held-out episodes generated together (greedy results do not depend on it)."""

    @property
    def fingerprint(self) -> str:
        """What makes two runs the same training run (the run directory and the held-out
        suites and the thread count excluded: suites asked for later are added to a finished
        run, and a run may resume with another thread count)."""
        blob = json.dumps([Path(self.base).name, identity_overrides(self.overrides), self.probe],
                          sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Job:
        return cls(**data)


# -- runs per experiment -------------------------------------------------------------------------
def vanilla(st: Settings, preset: str) -> RunSpec:
    """The starting checkpoint evaluated without training. Evaluation is greedy with a fixed
    seed, so it is the same for every training seed: computed once."""
    return RunSpec("vanilla", preset, preset, "grpo", st.seeds[0], 0, label="vanilla")


def method_runs(st: Settings, preset: str, methods: tuple[str, ...]) -> list[RunSpec]:
    """LOPD, GRPO and Skill-SD on every seed (efficiency curves, spread); others on the first."""
    return [RunSpec(m, preset, preset, m, seed, st.steps, label=LABELS[m])
            for m in methods
            for seed in (st.seeds if m in EFFICIENCY_METHODS else st.seeds[:1])]


def ablation_variants(st: Settings) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, label, overrides): margin m, K, J, frozen composer, text context."""
    (k_small, k), (j_small, j) = st.scale.k_values, st.scale.j_values
    return [
        ("default", f"LOPD (m=0.05, K={k}, J={j})", ("method.margin=0.05",)),
        ("m0", "m = 0 (no margin)", ("method.margin=0",)),
        ("m0.01", "m = 0.01", ("method.margin=0.01",)),
        ("m0.1", "m = 0.1", ("method.margin=0.1",)),
        (f"K{k_small}", f"K = {k_small}", (f"method.latent_tokens={k_small}",)),
        (f"J{j_small}", f"J = {j_small}", (f"method.num_experiences={j_small}",)),
        ("frozen", "frozen composer (phi = phi_0)", ("method.freeze_composer=true",)),
        ("text", "text context (same retrieved experiences)", ("method.context=text",)),
    ]


def ablation_runs(st: Settings) -> list[RunSpec]:
    (_, k), (_, j) = st.scale.k_values, st.scale.j_values
    base = (*st.scale.ablation_overrides, f"method.latent_tokens={k}",
            f"method.num_experiences={j}")
    return [RunSpec(name, "ablations", "toolworld", "lopd", st.seeds[0], st.ablation_steps,
                    overrides=(*base, *extra), evaluate=st.ablation_eval, probe=True,
                    label=label)
            for name, label, extra in ablation_variants(st)]


def experiment_runs(experiment: str, st: Settings) -> list[RunSpec]:
    """The runs an experiment reads (and trains if missing)."""
    if experiment == "efficiency":
        return method_runs(st, "toolworld", EFFICIENCY_METHODS)
    if experiment == "methods":
        return [spec for preset in st.presets for spec in
                [vanilla(st, preset), *method_runs(st, preset, EFFICIENCY_METHODS + OTHER_METHODS)]]
    if experiment == "ablations":
        return ablation_runs(st)
    if experiment == "behaviour":
        return [vanilla(st, "toolworld"), *method_runs(st, "toolworld", ("lopd", "grpo"))]
    if experiment == "cost":
        return method_runs(st, "toolworld", EFFICIENCY_METHODS + OTHER_METHODS)
    raise ValueError(f"unknown experiment {experiment!r}")


def selected(specs: list[RunSpec], st: Settings) -> list[RunSpec]:
    """Unique runs, restricted to ``--only`` names (the others are read if they exist)."""
    unique = list({s.key: s for s in specs}.values())
    return [s for s in unique if not st.only or s.name in st.only]


# -- configs ---------------------------------------------------------------------------------------
def eval_suites(spec: RunSpec, st: Settings) -> dict[str, int | None]:
    """Held-out suites and task counts (None = all): the same for every method of a preset."""
    if not spec.evaluate:
        return {}
    if spec.preset == "code":
        return {"humaneval": st.humaneval or None}
    suites: dict[str, int | None] = {"toolworld-test": st.scale.eval_tasks or None}
    if st.bfcl:
        suites["bfcl-multi-turn"] = None if st.bfcl < 0 else st.bfcl
    return suites


def job_for(spec: RunSpec, st: Settings) -> Job:
    run_dir = (st.runs_root / spec.group / f"{spec.name}-s{spec.seed}").resolve()
    overrides = [*st.scale.overrides[spec.preset], f"method.name={spec.method}",
                 f"run.seed={spec.seed}", f"optim.steps={spec.steps}"]
    if st.model:
        overrides.append(f"model.name={st.model}")
    if spec.preset == "toolworld":
        overrides.append(f"model.init_adapter={st.init_adapter}")
    overrides += [*spec.overrides, *st.extra, f"run.out_dir={run_dir}"]
    return Job(spec.key, spec.name, spec.method, spec.seed, str(run_dir),
               st.scale.base[spec.preset], overrides, eval_suites(spec, st), spec.probe,
               str((st.runs_root / "_coldstart").resolve()))


# -- estimate --------------------------------------------------------------------------------------
def estimate(jobs: list[Job], st: Settings, done: set[str]) -> tuple[float | None, list[str]]:
    """Planned seconds of the runs not done yet (None without a cost model) and a breakdown."""
    from benchmarks.experiments.runner import cache_key, cache_ready
    from lopd.config import load_config

    cost = st.scale.cost
    if cost is None:
        return None, ["no cost model at this scale (GPU timings unknown)"]
    total, lines, caches = 0.0, [], set()
    for job in jobs:
        if job.key in done:
            continue
        config = load_config(job.base, job.overrides)
        per_step = config.optim.tasks_per_step * config.optim.group_size
        step = cost.step_s[job.method] * per_step / cost.per_step_rollouts
        step *= 1.1 if config.method.context == "text" else 1.0
        seconds = cost.run_overhead_s + config.optim.steps * step
        seconds += sum(cost.eval_s_per_task.get(s, 5.0) * (n or 200) for s, n in job.evals.items())
        seconds += cost.probe_s if job.probe else 0.0
        if job.method == "lopd" and not cache_ready(Path(job.cache_root), config):
            caches.add(cache_key(config))
        lines.append(f"  {job.key:<28} {config.optim.steps} steps x {per_step} rollouts"
                     f"{' + eval ' + ','.join(job.evals) if job.evals else ''}  ~{seconds / 60:.1f} min")
        total += seconds
    if caches:
        total += len(caches) * cost.cache_s
        lines.append(f"  {len(caches)} bank seeding + composer cold start(s)  "
                     f"~{len(caches) * cost.cache_s / 60:.1f} min")
    if needs_warm_start(st, jobs):
        total += cost.sft_s
        lines.append(f"  warm start `lopd sft --steps 30` -> {st.init_adapter}  "
                     f"~{cost.sft_s / 60:.1f} min")
    return total, lines


def needs_warm_start(st: Settings, jobs: list[Job]) -> bool:
    adapter = Path(st.init_adapter) if st.init_adapter else None
    if adapter is None or (REPO / adapter).exists() or adapter.exists():
        return False
    return any(f"model.init_adapter={st.init_adapter}" in job.overrides for job in jobs)
