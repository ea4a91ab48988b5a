"""ACEBench's agent tasks (multi-step and multi-turn) as lopd environments.

Suites: ``acebench-multi-step`` (20 tasks), ``acebench-multi-turn`` (30 tasks, with a simulated
user) and ``acebench`` (both). See ``env`` for the episode semantics, ``scoring`` for the two
scores, ``user`` for the simulated user, ``phone`` / ``travel`` for the scenario classes.
"""

from lopd.envs.acebench.env import ACEBenchEnv, load_acebench_tasks, oracle_calls

__all__ = ["ACEBenchEnv", "load_acebench_tasks", "oracle_calls"]
