"""The tokens a business rule decides, in a rollout of a ToolWorld rules task.

A rule of ``lopd.envs.toolworld.rules`` moves only a few tokens of a trajectory: where the
agent, about to act, either first makes the prerequisite call the organisation's policy needs
(``verify_identity`` before ``transfer``) or goes straight to the gated call. A per-token
average over the whole trajectory (the margin Delta) dilutes what a context does there, so
``decision_tokens`` finds them: in the rollout's sampled tokens, the tool-name tokens of its
first call to either a prerequisite or a gated tool of a prerequisite rule its task meets.
It returns their indices among the trajectory's action tokens (the order of the trainer's
supervised positions) and which of the two the call was. Naming rules (a renamed file or
title) decide argument tokens and are left out.
"""

from __future__ import annotations

import re

_NAME = re.compile(r'"name"\s*:\s*"([A-Za-z_][A-Za-z0-9_]*)"')


def decision_names(task) -> tuple[set[str], set[str]]:
    """(prerequisite tools, gated tools) of the prerequisite rules ``task`` meets; empty sets
    for a task without an organisation."""
    from lopd.envs.toolworld.rules_orgs import ORGS

    org = ORGS.get(task.metadata.get("org", ""))
    if org is None:
        return set(), set()
    fired = set(task.metadata.get("rules", ()))
    rules = [r for r in org.rules if r.key in fired and r.need is not None]
    return {r.need for r in rules}, {g for r in rules for g in r.gated}


def char_ends(tokenizer, ids: list[int]) -> list[int]:
    """Character offset where each token's text ends in ``decode(ids)`` (incremental decode)."""
    return [len(tokenizer.decode(ids[: k + 1])) for k in range(len(ids))]


def decision_tokens(traj, tokenizer) -> tuple[list[int], str] | None:
    """(indices among the action tokens, "prerequisite" or "gated") of the rule-deciding call's
    name, or None when the rollout never calls either kind (or its task has no such rule)."""
    needs, gated = decision_names(traj.task)
    if not needs:
        return None
    before = 0  # action tokens in earlier turns
    for start, end in traj.turn_spans:
        ids = list(traj.input_ids[start:end])
        mask = traj.action_mask[start:end]
        text = tokenizer.decode(ids)
        for match in _NAME.finditer(text):
            name = match.group(1)
            if name not in needs and name not in gated:
                continue
            ends = char_ends(tokenizer, ids)
            low, high = match.span(1)
            picked, seen = [], 0
            for k, end_char in enumerate(ends):
                begin = ends[k - 1] if k else 0
                if mask[k]:
                    if begin < high and end_char > low:
                        picked.append(before + seen)
                    seen += 1
            return (picked, "prerequisite" if name in needs else "gated") if picked else None
        before += sum(mask)
    return None
