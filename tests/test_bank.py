"""Experience bank: dedup, persistence across processes, crash safety, concurrent reads,
eviction; trajectory condensing; the `lopd bank` back ends."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from lopd.experience.bank import Experience, ExperienceBank, bank_path
from lopd.experience.condense import (
    condense_code,
    condense_trajectory,
    experience_from_trajectory,
    parse_tool_calls,
)
from lopd.types import Task, Trajectory

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def exp(i: int, task: str | None = None, step: int = 0, source: str = "rollout",
        emb: bool = False) -> Experience:
    e = np.random.default_rng(i).standard_normal(384).astype(np.float32) if emb else None
    return Experience(task_id=task or f"t{i}", domain=["bank", "travel", "shop"][i % 3],
                      task_text=f"task text {i}", trace=f"trace {i}", reward=1.0,
                      step_added=step, source=source, embedding=e)


def run_py(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_add_get_dedup_and_filters(tmp_path):
    with ExperienceBank(bank_path(tmp_path)) as bank:
        ids = bank.add([exp(0), exp(1, step=5), exp(0)])  # in-batch duplicate stored once
        assert ids == [1, 2] and bank.count() == 2
        assert bank.add([exp(0), exp(1, step=5)]) == []  # same (task, trace) again: skipped
        same_trace_other_task = exp(0, task="other")
        assert bank.add([same_trace_other_task]) == [3]
        assert [e.id for e in bank.get([3, 1, 99])] == [3, 1]  # asked order, missing skipped
        assert [e.id for e in bank.all(max_step=0)] == [1, 3]
        got = bank.get([2])[0]
        assert (got.task_id, got.step_added, got.source, got.embedding) == ("t1", 5, "rollout",
                                                                             None)
        with pytest.raises(ValueError):
            bank.add([exp(7, source="dream")])
        with pytest.raises(ValueError):
            bank.add([Experience("t", "d", "x", "y", embedding=np.zeros(10, np.float32))])
        assert bank.count() == 3  # failed batches left nothing behind
        mode = sqlite3.connect(bank.path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_embeddings_roundtrip_stats_and_rollback(tmp_path):
    with ExperienceBank(tmp_path / "b.sqlite") as bank:
        bank.add([exp(i, step=i, emb=i % 2 == 0, source="seed" if i < 2 else "rollout")
                  for i in range(6)])
        ids, tasks, _, emb = bank.embedded_rows()
        assert ids.tolist() == [1, 3, 5] and tasks == ["t0", "t2", "t4"]
        np.testing.assert_array_equal(emb[1], exp(2, emb=True).embedding)
        assert [e.id for e in bank.missing_embeddings()] == [2, 4, 6]
        bank.set_embeddings([2], np.ones((1, 384), np.float32))
        assert bank.get([2])[0].embedding.sum() == 384
        st = bank.stats()
        assert st["rows"] == 6 and st["embedded"] == 4 and st["tasks"] == 6
        assert st["per_source"] == {"rollout": 4, "seed": 2}
        assert st["per_domain"] == {"bank": 2, "travel": 2, "shop": 2}
        assert (st["step_min"], st["step_max"], st["mean_reward"]) == (0, 5, 1.0)
        assert bank.rollback_to_step(3) == 2 and bank.count() == 4


def test_capacity_evicts_most_represented_rollouts_then_seeds(tmp_path):
    with ExperienceBank(tmp_path / "b.sqlite", capacity=5) as bank:
        bank.add([exp(0, source="seed"), exp(1, source="seed")])
        a = bank.add([exp(10 + i, task="A") for i in range(3)] + [exp(20, task="B")])
        assert bank.count() == 5 and bank.last_evicted == [3]  # the oldest row of task A
        assert a == [4, 5, 6]  # the ids inserted and kept
        bank.add([exp(21, task="B"), exp(22, task="B")])  # now A=2, B=3: B's oldest go first
        kept = {(e.task_id, e.trace) for e in bank.all()}
        assert ("B", "trace 20") not in kept and ("t0", "trace 0") in kept
        assert bank.count() == 5
    with ExperienceBank(tmp_path / "c.sqlite", capacity=2) as bank:
        new = bank.add([exp(0, source="seed"), exp(1, source="seed"), exp(2, source="seed")])
        assert new == [2, 3] and bank.last_evicted == [1]  # seeds go only when no rollouts


def test_persistence_across_processes(tmp_path):
    writer = run_py("""
        import sys, numpy as np
        from lopd.experience.bank import Experience, ExperienceBank
        with ExperienceBank(sys.argv[1]) as bank:
            rows = [Experience(f"t{i}", "d", f"text {i}", f"trace {i}", reward=0.5, step_added=i,
                               embedding=np.full(384, i, np.float32)) for i in range(50)]
            print(len(bank.add(rows)))
    """, str(tmp_path / "bank.sqlite"))
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert out.strip() == "50"
    reader = run_py("""
        import sys, json
        from lopd.experience.bank import ExperienceBank
        with ExperienceBank(sys.argv[1]) as bank:
            print(json.dumps([[e.id, e.task_id, e.step_added, float(e.embedding[0])]
                              for e in bank.all()]))
    """, str(tmp_path / "bank.sqlite"))
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    rows = json.loads(out)
    assert len(rows) == 50 and rows[7] == [8, "t7", 7, 7.0]


def test_sigkill_mid_batch_keeps_committed_rows(tmp_path):
    """Kill the writer inside an open write transaction: all rows of the batch are inserted
    (a tiny page cache makes SQLite spill pages to the WAL early) but COMMIT has not run."""
    path = tmp_path / "bank.sqlite"
    batch = 2000
    child = run_py(f"""
        import sys, time
        from lopd.experience.bank import Experience, ExperienceBank

        class Stalling(ExperienceBank):
            stall = False

            def _evict(self, conn):  # runs inside add's transaction, after the inserts
                if self.stall:
                    print("inside", flush=True)
                    time.sleep(60)
                return []

        bank = Stalling(sys.argv[1], capacity=10**9)
        bank._conn.execute("PRAGMA cache_size=20")
        for b in range(4):
            bank.stall = b == 3
            bank.add([Experience(f"t{{b}}-{{i}}", "d", "x" * 200, "trace " * 100)
                      for i in range({batch})])
            print("done", b, bank.count(), flush=True)
    """, str(path))
    committed = 0
    for line in child.stdout:
        if line.startswith("done"):
            committed = int(line.split()[2])
        elif line.startswith("inside"):
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL and committed == 3 * batch
    with ExperienceBank(path) as bank:
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert bank.count() == committed  # every committed row, nothing of the killed batch
        assert len(bank.all(with_embeddings=False)) == committed
        assert bank.add([exp(1)]) == [committed + 1]  # still writable, ids continue


def test_reader_queries_while_writer_appends(tmp_path):
    path = tmp_path / "bank.sqlite"
    ExperienceBank(path).close()
    go = tmp_path / "go"
    writer = run_py("""
        import os, sys, time, numpy as np
        from lopd.experience.bank import Experience, ExperienceBank
        rng = np.random.default_rng(0)
        while not os.path.exists(sys.argv[2]):  # start once the reader is ready
            time.sleep(0.01)
        with ExperienceBank(sys.argv[1]) as bank:
            for b in range(40):
                e = rng.standard_normal((50, 384)).astype(np.float32)
                bank.add([Experience(f"t{b}-{i}", "d", "text", f"trace {b} {i}", step_added=b,
                                     embedding=e[i]) for i in range(50)])
                time.sleep(0.02)  # leave the reader room even on a loaded machine
        print("ok")
    """, str(path), str(go))
    from lopd.experience.retriever import HashingEmbedder, Retriever

    seen = []
    with ExperienceBank(path) as bank:
        retriever = Retriever(bank, HashingEmbedder())
        go.write_text("go")
        q = np.random.default_rng(1).standard_normal((4, 384)).astype(np.float32)
        deadline = time.time() + 60
        while time.time() < deadline:
            done = writer.poll() is not None
            n = bank.count()
            retriever.sync(embed_missing=False)
            hits = retriever.search(q, [None] * 4, j=3)
            assert len(retriever) >= n and all(len(h) == min(3, len(retriever)) for h in hits)
            seen.append(len(retriever))
            if done:
                break
            time.sleep(0.01)
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0 and out.strip() == "ok", err
    assert seen == sorted(seen) and seen[-1] == 2000
    assert len(set(seen)) > 2  # the reader really ran while rows were being appended


# -- condensing ----------------------------------------------------------------------------
MESSAGES = [
    {"role": "system", "content": "You are an agent. Tools: ..."},
    {"role": "user", "content": "Book the cheapest flight from SFO to Tokyo."},
    {"role": "assistant", "content": 'Searching. <tool_call>{"name": "search_flights", '
     '"arguments": {"origin": "SFO", "dest": "NRT"}}</tool_call><tool_call>{oops}</tool_call>'},
    {"role": "tool", "content": '{"flights": [{"id": "F1", "price": 500}, ' + "x" * 400 + "]}"},
    {"role": "assistant", "content": '<tool_call>{"name": "book", "arguments": "{\\"id\\": '
     '\\"F1\\"}"}</tool_call> <tool_call>{"name": "pay", "arguments": {}}</tool_call>'},
    {"role": "tool", "content": "booked\n\n  F1"},
    {"role": "tool", "content": "paid"},
    {"role": "assistant", "content": "not json <tool_call>[1, 2]</tool_call>"},
    {"role": "tool", "content": "error: no valid tool call"},
    {"role": "user", "content": "Thanks! Now email me the receipt."},
    {"role": "assistant", "content": "Done: booked F1 for $500."},
]


def test_parse_tool_calls_skips_malformed_blocks():
    text = ('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
            '<tool_call>{"name": 3}</tool_call><tool_call>{"arguments": {}}</tool_call>'
            '<tool_call>{"name": "b", "arguments": "not json"}</tool_call>'
            '<tool_call>{"name": "c"}</tool_call><tool_call>{"name": "d", "arguments": [1]}'
            '</tool_call><tool_call>{"name": "e", "arguments": {}}')  # unterminated
    assert parse_tool_calls(text) == [("a", {"x": 1}), ("c", {})]


def test_condense_trajectory_format():
    trace = condense_trajectory(MESSAGES, "Book the cheapest flight from SFO to Tokyo.",
                                max_result_chars=40)
    lines = trace.splitlines()
    assert lines[0] == "Task: Book the cheapest flight from SFO to Tokyo."
    assert lines[1].startswith("1. call search_flights(origin='SFO', dest='NRT') -> {\"flights")
    assert lines[1].endswith("…") and len(lines[1].split(" -> ")[1]) == 40
    assert lines[2] == "2. call book(id='F1') -> booked F1"
    assert lines[3] == "3. call pay() -> paid"
    assert lines[4] == "4. (no call) -> error: no valid tool call"
    assert lines[5] == "User: Thanks! Now email me the receipt."
    assert lines[6] == "Answer: Done: booked F1 for $500."
    assert "You are an agent" not in trace and len(lines) == 7


def test_condense_code_and_experience_from_trajectory():
    code = condense_code("Add two numbers.", "def add(a, b):\n    return a + b\n", "3/3 passed")
    assert code == ("Task: Add two numbers.\nProgram:\n```python\ndef add(a, b):\n"
                    "    return a + b\n```\nTests: 3/3 passed")
    task = Task(id="tw-1", split="train", domain="travel", prompt="Book a flight.")
    traj = Trajectory(task=task, input_ids=[], action_mask=[], turn_spans=[], prompt_len=0,
                      messages=MESSAGES, reward=1.0, success=True)
    e = experience_from_trajectory(traj, step=7)
    assert (e.task_id, e.domain, e.step_added, e.source, e.reward) == ("tw-1", "travel", 7,
                                                                       "rollout", 1.0)
    assert e.trace.startswith("Task: Book a flight.\n1. call search_flights(")
    ctask = Task(id="he-1", split="train", domain="humaneval", prompt="Add two numbers.")
    msgs = [{"role": "user", "content": "..."},
            {"role": "assistant", "content": "Here:\n```python\ndef add(a, b):\n"
             "    return a + b\n```"}]
    ctraj = Trajectory(task=ctask, input_ids=[], action_mask=[], turn_spans=[], prompt_len=0,
                       messages=msgs, reward=1.0, success=True,
                       stats={"test_summary": "3/3 passed"})
    assert experience_from_trajectory(ctraj, step=1, source="seed").trace == code


# -- lopd bank back ends ------------------------------------------------------------------
def test_cli_stats_query_export(tmp_path):
    from lopd.experience.cli import bank_export, bank_query, bank_stats
    from lopd.experience.retriever import HashingEmbedder, Retriever

    with ExperienceBank(bank_path(tmp_path)) as bank:
        Retriever(bank, HashingEmbedder()).add(
            [Experience("a", "bank", "transfer money to alice", "1. call transfer()"),
             Experience("b", "travel", "book a flight to paris", "1. call book()", step_added=2)])
    stats = bank_stats(tmp_path)
    assert "rows" in stats and "travel" in stats and "0 .. 2" in stats
    out = bank_query(tmp_path, "transfer money to bob", j=1, embedder=HashingEmbedder())
    assert "call transfer()" in out and "book()" not in out
    n = bank_export(tmp_path, tmp_path / "out" / "bank.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "out" / "bank.jsonl").read_text().splitlines()]
    assert n == 2 and rows[1]["task_id"] == "b" and rows[1]["step_added"] == 2
    with pytest.raises(FileNotFoundError):
        bank_stats(tmp_path / "nowhere")


def test_processes_opening_a_new_bank_at_once(tmp_path):
    """Ranks of a distributed run open the same new bank file (and its transcript table) at the
    same moment; switching a fresh file to WAL can then report ``database is locked`` without
    waiting, which must be retried, not raised."""
    code = """
        import sys, time
        from pathlib import Path
        from lopd.experience.bank import ExperienceBank
        from lopd.experience.transcripts import TranscriptStore
        root, start = Path(sys.argv[1]), float(sys.argv[2])
        for i in range(25):
            while time.time() < start + 0.2 * i:
                pass
            path = root / f"b{i}.sqlite"
            ExperienceBank(path).close()
            TranscriptStore(path)
        print("ok")
    """
    start = f"{time.time() + 2.0:.3f}"
    procs = [run_py(code, str(tmp_path), start) for _ in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == "ok"
