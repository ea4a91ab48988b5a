"""ToolWorld: an EnvScaler-style suite of stateful tool-use domains with checklist rewards.

Seven domains (banking, inventory, calendar, filesystem, shopping, travel; smarthome held out
for transfer), each a Python class whose ``@tool`` methods are the tools, plus a seeded task
generator per domain and difficulty tier (1-5 = tool calls in the reference solution).
See ``base`` for checks, ``env`` for the episode semantics and ``tasks`` for the splits.
"""

from lopd.envs.toolworld.env import ToolWorldEnv
from lopd.envs.toolworld.suites import load_tasks
from lopd.envs.toolworld.tasks import (
    DEFAULT_MIX,
    DOMAINS,
    TRAIN_DOMAINS,
    TRANSFER_DOMAINS,
    generate_spec,
)

__all__ = [
    "DEFAULT_MIX", "DOMAINS", "TRAIN_DOMAINS", "TRANSFER_DOMAINS", "ToolWorldEnv",
    "generate_spec", "load_tasks",
]
