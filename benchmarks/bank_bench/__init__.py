"""The experience bank + retriever benchmark behind ``benchmarks/bench_bank.py``, split by part.

Modules: ``common`` (sizes, timing, recall and the IVF measurements all parts share),
``scale`` (part a: random embeddings up to 100k rows), ``toolworld`` (part b: MiniLM embeddings
of ToolWorld prompts), ``quality_tasks`` and ``quality`` (part c: same-domain neighbours on
templated tasks), ``report`` (bank.md from bank.json) and ``run`` (the whole run, or only the
re-render).
"""
