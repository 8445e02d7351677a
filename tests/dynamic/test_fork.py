"""Forked processes (`multiprocessing` with fork): every process's calls are its own.

A forked child inherits the watcher, its call counter and anything it holds in memory. Its
events must carry its own pid, no record may replace another, and what the parent held at
the fork must not be written twice. Real forks, real torch; ground truth from gradients."""

from __future__ import annotations

import collections
import json
import os

import pytest

from dynhelp import PY, SCRIPTS, env_with_root

pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.scenarios("forked_workers")
def test_a_diverging_forked_worker_is_not_hidden_by_a_clean_one(runs):
    r = runs["forked_workers"]
    workers = r.values["workers"]
    assert [w["differs"] for w in workers if w["harmful"]] == [[True, True]], workers
    assert not any(any(w["differs"]) for w in workers if not w["harmful"]), workers
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert "`SCALE` changed between forward and backward (1.0 → 3.0)" in f["evidence"]
    # 1 call in the parent, 2 + 3 in two forked workers, 6 in a fork pool.
    assert "(2 of 12 replays diverged)" in f["evidence"], f
    assert r.rc == 1


def watched_observations(tmp_path, script, *args):
    from ckptlint.dynamic.runner import run_watched

    values = tmp_path / "values.json"
    with open(os.devnull, "w") as sink:
        watched = run_watched([PY, str(SCRIPTS / script), *args], output=sink,
                              env=env_with_root({"CKPT_TEST_OUT": str(values)}))
    assert watched.info.returncode == 0, watched.info.stderr_tail
    return watched.observations, json.loads(values.read_text())


def calls_per_pid(observations) -> dict[int, int]:
    per_pid: collections.Counter = collections.Counter()
    for record in observations.calls.values():
        pid = record.key[1] if record.kind == "summary" else record.key[0]
        per_pid[pid] += record.calls
    return dict(per_pid)


@pytest.mark.slow
def test_each_forked_call_is_recorded_once_under_its_own_pid(tmp_path):
    observations, values = watched_observations(tmp_path, "forked_workers.py")
    real = collections.Counter()
    for worker in values["workers"]:
        real[worker["pid"]] += len(worker["differs"])
    assert sum(real.values()) == 12
    assert calls_per_pid(observations) == dict(real)
    records = list(observations.calls.values())
    assert all(r.kind == "call" and r.passes == {"forward": 1, "replay": 1} for r in records)
    diverged = [r for r in records if r.diverged_count]
    harmful = next(w["pid"] for w in values["workers"] if w["harmful"])
    assert [r.key[0] for r in diverged] == [harmful, harmful]


@pytest.mark.slow
def test_a_forked_child_starts_its_own_budget_and_flushes_when_it_ends(tmp_path):
    """More calls than are written in full, in the parent and then in a multiprocessing child
    (which ends with os._exit): each process's summary counts its own calls, the child does
    not write what its parent held at the fork, and its last counts are not lost."""
    from ckptlint.dynamic.watch.budget import RAW_CALLS

    calls = RAW_CALLS + 20
    observations, values = watched_observations(tmp_path, "fork_many_calls.py", str(calls))
    assert values["exitcode"] == 0
    assert calls_per_pid(observations) == {values["parent"]: calls, values["child"]: calls}
    summaries = [r for r in observations.calls.values() if r.kind == "summary"]
    assert sorted(r.key[1] for r in summaries) == sorted([values["parent"], values["child"]])
    assert all(r.calls == 20 and r.compare_count == 20 for r in summaries), summaries
