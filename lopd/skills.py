"""Skill-SD's skill library: skills the model summarises from its own successful trajectories.

After each step, every task with a new success gets one skill: the student, prompted with the
condensed successful trace, writes a one-sentence general procedure (greedy, 48 tokens). Skills
live in their own SQLite bank (``RUN/skills.sqlite``) and are retrieved by task similarity with
the same dense retriever as LOPD's experiences (the querying task's own skills excluded).
When the model writes nothing usable (a weak or untrained model), the skill falls back to the
trace's tool sequence ("Call a, then b.") so the library never stores empty skills.
"""

from __future__ import annotations

from pathlib import Path

from lopd.experience.bank import Experience, ExperienceBank
from lopd.experience.condense import condense_trajectory, parse_tool_calls
from lopd.types import Trajectory

_PROMPT = ("Here is how a task was solved:\n{trace}\n\nIn one sentence, state the general "
           "procedure (which tools to call in which order) that solves tasks like this.")


class SkillLibrary:
    def __init__(self, path: Path, runtime, num_skills: int):
        from lopd.experience.retriever import Embedder, Retriever

        self.rt = runtime
        self.j = num_skills
        self.bank = ExperienceBank(path)
        self.retriever = Retriever(self.bank, Embedder())
        self.summarised = {e.task_id for e in self.bank.all(with_embeddings=False)}

    def summarise(self, trajs: list[Trajectory]) -> list[str]:
        from lopd.generation import HFBackend, SamplingParams

        renderer = self.rt.renderer
        prompts = [renderer.render([{"role": "user", "content": _PROMPT.format(
            trace=condense_trajectory(t.messages, t.task.prompt))}], add_generation_prompt=True)[0]
            for t in trajs]
        backend = HFBackend(self.rt.model, renderer.stop_ids, self.rt.pad_id)
        outputs = backend.generate(prompts, SamplingParams(max_new_tokens=48, temperature=0.0))
        texts = [self.rt.tokenizer.decode(o, skip_special_tokens=True).strip() for o in outputs]
        return [text or _tool_sequence(t) for text, t in zip(texts, trajs)]

    def add_from(self, wins: list[Trajectory], step: int) -> None:
        fresh: dict[str, Trajectory] = {}
        for traj in wins:
            if traj.task.id not in self.summarised:
                fresh.setdefault(traj.task.id, traj)
        if not fresh:
            return
        skills = self.summarise(list(fresh.values()))
        rows = [Experience(task_id=t.task.id, domain=t.task.domain, task_text=t.task.prompt,
                           trace=skill, reward=t.reward, step_added=step, source="rollout")
                for t, skill in zip(fresh.values(), skills) if skill]
        self.retriever.add(rows)
        self.summarised.update(fresh)

    def lookup(self, trajs: list[Trajectory], step: int) -> list[list[str]]:
        if len(self.retriever) == 0:
            return [[] for _ in trajs]
        found = self.retriever.retrieve([(t.task.id, t.task.prompt) for t in trajs], j=self.j,
                                        max_step=step)
        return [[e.trace for e in row] for row in found]

    def rollback(self, step: int) -> None:
        self.bank.rollback_to_step(step)
        self.retriever.sync()
        self.summarised = {e.task_id for e in self.bank.all(with_embeddings=False)}


def _tool_sequence(traj: Trajectory) -> str:
    names = [name for m in traj.messages if m["role"] == "assistant"
             for name, _ in parse_tool_calls(m["content"])]
    return ("Call " + ", then ".join(names) + ".") if names else "Answer directly."
