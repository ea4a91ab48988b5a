"""The lopd-vs-TRL step benchmark behind ``benchmarks/bench_trl.py``, split by role.

``bench_trl.py`` (what is compared and how to run it) starts one subprocess per side; each runs
the same training steps on the same inputs and writes its measurements, and the parent
summarises both and writes ``benchmarks/results/trl_{method}.{json,md}``.

Modules: ``common`` (paths, the shared prompts, reward and SDFT demonstrations, process CPU
and memory), ``lopd_side`` (the lopd child: ``lopd.trainer.Trainer``), ``trl_side`` (the TRL
child: dataset, configs and trainers) with ``trl_hooks`` (what the benchmark plugs into TRL's
trainers to time its steps), ``child`` (a child's entry point), ``parent`` (runs the children
and summarises their steps), ``report`` (the JSON and Markdown results) and ``cli`` (the
command line).
"""
