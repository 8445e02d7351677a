"""The watcher's budget: every call at first, then summaries and samples (budget.py).

What is written stays bounded however many calls a site makes, the counts stay exact, and a
divergence after the calls written in full is still seen with its evidence."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from ckptlint.dynamic.watch.budget import RAW_CALLS, SAMPLES, EventBudget
from ckptlint.dynamic.runner import EventCounter
from ckptlint.dynamic.verdicts import Observations, count

from dynhelp import PY, SCRIPTS, env_with_root, findings_for

SITE = ["/src/train.py", 30, 9]
TARGET = [["/src/model.py", 10, "Block.forward"]]


def one_call(budget: EventBudget, call_id: int, diverges: bool = False) -> None:
    """The events the recorder gives the budget for one call: call, forward, replay, compare."""
    log = {}
    budget.call(log, {"ev": "call", "id": call_id, "mode": "non-reentrant", "site": SITE,
                      "targets": TARGET, "grad": True, "preserve_rng_state": True,
                      "inputs_require_grad": True, "params": 2, "specs": []})
    for phase in ("forward", "replay"):
        budget.passed(log, {"ev": "pass", "call": call_id, "phase": phase, "n": 1,
                            "early_stop": phase == "replay", "error": None, "devices": ["cpu"],
                            "state": {}, "lines": None}, notable=False)
    text = "saved a different tanh output" if diverges else "matched"
    budget.compared(log, {"ev": "compare", "call": call_id, "phase": "replay",
                          "match": not diverges, "matters": diverges, "kind": "saved-value",
                          "text": text})


def record(calls: int, diverging: set[int]) -> list[dict]:
    written: list[dict] = []
    budget = EventBudget(lambda event: written.append({**event, "pid": 7}))
    for call_id in range(1, calls + 1):
        one_call(budget, call_id, call_id in diverging)
    budget.flush()
    return written


def test_writes_stay_bounded_and_counts_exact():
    diverging = {RAW_CALLS + 100 * k for k in range(1, SAMPLES + 6)}   # more than SAMPLES
    calls = RAW_CALLS + 100 * (SAMPLES + 6)
    written = record(calls, diverging)
    raw_calls = [e for e in written if e["ev"] == "call" and not e.get("sample")]
    samples = [e for e in written if e["ev"] == "call" and e.get("sample")]
    assert len(raw_calls) == RAW_CALLS
    assert [e["id"] for e in samples] == sorted(diverging)[:SAMPLES]
    # A sample is written whole: its held call and forward, then the replay and compare.
    assert len(written) <= 4 * (RAW_CALLS + SAMPLES) + 10   # + a few summary lines
    obs = Observations()
    for event in written:
        obs.add(event)
    records = list(obs.calls.values())
    assert count(records) == calls
    assert sum(r.compare_count for r in records) == calls
    assert sum(r.diverged_count for r in records) == len(diverging)
    assert sum(r.passes.get("replay", 0) for r in records) == calls
    [summary] = [r for r in records if r.kind == "summary"]
    assert summary.calls == calls - RAW_CALLS and summary.early_stops == calls - RAW_CALLS
    assert [c["text"] for c in summary.compares] == ["saved a different tanh output"]
    assert all(r.compares and not r.calls for r in records if r.kind == "sample")


def test_a_summary_is_written_in_deltas_that_add_up():
    written: list[dict] = []
    budget = EventBudget(lambda event: written.append({**event, "pid": 7}), raw_calls=2)
    for call_id in range(1, 6):
        one_call(budget, call_id)
        budget.flush()                       # one delta per call
    deltas = [e for e in written if e["ev"] == "summary"]
    assert [d["calls"] for d in deltas] == [1, 1, 1]
    obs = Observations()
    for event in written:
        obs.add(event)
    assert count(obs.calls.values()) == 5


def test_a_returning_pid_never_replaces_a_record(tmp_path):
    """A pid can come back (the system reuses numbers); so can a call id in a forked child."""
    events = []
    for diverges in (True, False):
        events += [{"ev": "call", "pid": 5, "id": 1, "site": SITE, "targets": TARGET},
                   {"ev": "pass", "pid": 5, "call": 1, "phase": "forward"},
                   {"ev": "pass", "pid": 5, "call": 1, "phase": "replay"},
                   {"ev": "compare", "pid": 5, "call": 1, "phase": "replay",
                    "match": not diverges, "matters": diverges, "text": "x"}]
    obs = Observations()
    for event in events:
        obs.add(event)
    assert [r.diverged_count for r in obs.calls.values()] == [1, 0]
    assert all(r.compare_count == 1 for r in obs.calls.values())


def test_progress_counter_reads_on_from_where_it_stopped(tmp_path):
    path = tmp_path / "obs.jsonl"
    counter = EventCounter(str(path))
    assert counter.update() == (0, 0)
    with open(path, "w") as handle:
        handle.write(json.dumps({"ev": "call", "id": 1, "site": SITE}) + "\n")
        handle.write('{"ev": "call", "id": 2, "si')          # a line still being written
    assert counter.update() == (1, 1)
    offset = counter.offset
    with open(path, "a") as handle:
        handle.write('te": [1, 2, 3]}\n')
        handle.write(json.dumps({"ev": "summary", "calls": 40, "site": SITE}) + "\n")
        handle.write(json.dumps({"ev": "call", "id": 9, "sample": True, "site": SITE}) + "\n")
    assert counter.update() == (42, 2)
    assert counter.offset > offset == len(path.read_bytes().split(b"\n")[0]) + 1


# --------------------------------------------------------------------------- real runs

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="needs torch")


@pytest.mark.slow
@pytest.mark.scenarios("late_divergence")
@needs_torch
def test_a_divergence_after_the_calls_written_in_full_still_confirms(runs):
    r = runs["late_divergence"]
    assert r.values == {"calls": 200, "wrong": [150]}     # ground truth from gradients
    assert 150 > RAW_CALLS
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert "saved a different tanh output" in f["evidence"]
    assert "`SCALE` changed between forward and backward (1.0 → 2.0)" in f["evidence"]
    assert "(1 of 200 replays diverged)" in f["evidence"]
    assert r.rc == 1


@pytest.mark.slow
@needs_torch
def test_many_calls_keep_a_fixed_number_of_records_and_exact_counts(monkeypatch):
    from ckptlint.dynamic.runner import run_watched
    from ckptlint.dynamic.verdicts import build_plan, judge_all

    monkeypatch.chdir(SCRIPTS)              # the findings name the script relative to it
    calls = 3 * RAW_CALLS
    findings = findings_for("many_calls.py")
    plan = build_plan(findings)
    with open(os.devnull, "w") as sink:
        watched = run_watched([PY, str(SCRIPTS / "many_calls.py"), str(calls)], plan=plan,
                              output=sink, env=env_with_root())
    assert watched.info.returncode == 0, watched.info.stderr_tail
    records = list(watched.observations.calls.values())
    assert len(records) == RAW_CALLS + 1                 # the first calls and one summary
    assert count(records) == calls
    [f] = judge_all(findings, watched.observations, (), watched.info, plan)
    assert f.verdict == "cleared", f.evidence
    assert f.evidence.startswith(f"replay matched the forward {calls} times")
    assert "`SCALE` did not change between forward and replay" in f.evidence
