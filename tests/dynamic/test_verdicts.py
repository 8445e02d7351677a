"""The verdict join and the pass comparison, on hand-made observations (no torch, no child)."""

from __future__ import annotations

import json
from dataclasses import replace

from ckptlint.dynamic.watch.compare import compare
from ckptlint.dynamic.verdicts import Observations, RunInfo, build_plan, exit_status, judge_all
from ckptlint.findings import Finding, Position, SiteRef, TargetRef

from dynhelp import MESSAGE, finding_data


def saved(op, role, s, shape=(2,), check=None):
    """A saved-tensor entry whose digest has the sum `s` (and a check that follows it)."""
    return {"i": 0, "op": op, "role": role, "shape": list(shape), "dtype": "float64",
            "device": "cpu", "d": [s, int(s * 1000) if check is None else check]}


def test_replay_prefix_is_not_a_divergence():
    forward = {"ops": [["mm", [1, 1]], ["tanh", [2, 2]], ["sum", [3, 3]]],
               "saved": [saved("mm", "input", 1.0), saved("tanh", "output", 2.0)]}
    replay = {"ops": [["mm", [1, 1]], ["tanh", [2, 2]]],
              "saved": [saved("mm", "input", 1.0), saved("tanh", "output", 2.0)],
              "early_stop": True}
    assert compare(forward, replay)["match"]


def test_saved_value_difference_matters_and_unsaved_does_not():
    forward = {"ops": [["mul", [1, 1]], ["tanh", [2, 2]]], "saved": [saved("tanh", "output", 2.0)]}
    replay = {"ops": [["mul", [1, 1]], ["tanh", [3, 3]]], "saved": [saved("tanh", "output", 3.0)]}
    result = compare(forward, replay)
    assert result["matters"] and "saved a different tanh output (sum 3 vs 2" in result["text"]
    replay = {"ops": [["mul", [9, 9]], ["tanh", [2, 2]]], "saved": [saved("tanh", "output", 2.0)]}
    result = compare(forward, replay)
    assert not result["match"] and not result["matters"]
    assert "unsaved output of mul" in result["text"]


def test_values_that_differ_with_the_same_sum_are_a_divergence():
    """The digest's check decides (a permutation keeps the sum); the evidence says so."""
    forward = {"ops": [["gather", [6.0, 11]]], "saved": [saved("gather", "output", 6.0, check=11)]}
    replay = {"ops": [["gather", [6.0, 12]]], "saved": [saved("gather", "output", 6.0, check=12)]}
    result = compare(forward, replay)
    assert result["matters"] and result["kind"] == "saved-value"
    assert "(sum 6 in both passes, other values)" in result["text"]
    close = compare({"ops": [], "saved": [saved("mm", "output", 1.0000001, check=1)]},
                    {"ops": [], "saved": [saved("mm", "output", 1.0000002, check=2)]})
    assert "(sum 1 vs 1" not in close["text"] and "sum 1.0000002 vs 1.0000001" in close["text"]


def test_reentrant_forward_saves_nothing_so_outputs_are_compared():
    forward = {"ops": [["mul", [1, 1]], ["tanh", [2, 2]]], "saved": []}
    replay = {"ops": [["mul", [5, 5]], ["tanh", [2, 2]]], "saved": [saved("tanh", "output", 2.0)]}
    result = compare(forward, replay)
    assert result["matters"] and result["text"].startswith("mul (op #1) returned a different")


def test_count_and_error():
    forward = {"ops": [], "saved": [saved("a", "", 1.0), saved("b", "", 1.0)]}
    assert compare(forward, {"ops": [], "saved": [saved("a", "", 1.0)]})["kind"] == "saved-count"
    assert compare(forward, {"error": "CheckpointError: x"})["kind"] == "error"


def finding(code, row, name=None, site_row=30, target_row=10, chain=("Block.forward",)):
    target = TargetRef("m.py", target_row, "Block.forward")
    return Finding(code, MESSAGE, "m.py", Position(row, 5), Position(row, 9),
                   site=SiteRef("m.py", site_row, 5), chain=chain, target=target,
                   data=finding_data(code, "m.py", name, target, site_row))


def observations(tmp_path, events):
    path = tmp_path / "obs.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"ev": "pass", "cut')
    return Observations.load(str(path))


def call_event(cid, row, target_row=10, mode="non-reentrant", **kw):
    import os
    real = os.path.realpath("m.py")
    return {"ev": "call", "id": cid, "pid": 1, "mode": mode, "site": [real, row, 5],
            "targets": [[real, target_row, "Block.forward"]], **kw}


def test_aggregation_any_site_confirms_and_unexercised(tmp_path):
    f = finding("CKP201", 12, "SCALE")
    obs = observations(tmp_path, [
        {"ev": "start", "pid": 1},
        call_event(1, 30), {"ev": "pass", "pid": 1, "call": 1, "phase": "forward"},
        {"ev": "pass", "pid": 1, "call": 1, "phase": "replay"},
        {"ev": "compare", "pid": 1, "call": 1, "phase": "replay", "match": False,
         "matters": True, "kind": "saved-value", "text": "saved a different tanh output"},
        # A library call site (e.g. checkpoint_wrapper) joins through the function.
        call_event(2, 99, target_row=10),
    ])
    judged = judge_all([f], obs, run=RunInfo(returncode=0))
    assert judged[0].verdict == "confirmed"
    assert judged[0].evidence.startswith("replay of Block.forward() at m.py:30 saved a different")
    assert exit_status(judged, RunInfo(returncode=0)) == 1
    nothing = judge_all([finding("CKP201", 12, "SCALE", site_row=50, target_row=70)], obs,
                        run=RunInfo(returncode=0))
    assert nothing[0].verdict == "unexercised" and "never called" in nothing[0].evidence


def test_static_only_error_and_ckp501(tmp_path):
    import os
    static = Finding("CKP105", "x", "m.py", Position(1, 1), Position(1, 2),
                     data={"api": "torch.utils.checkpoint.checkpoint", "mode": "reentrant"})
    obs = observations(tmp_path, [
        {"ev": "start", "pid": 1},
        {"ev": "compile_used", "pid": 1, "site": [os.path.realpath("m.py"), 2, 1]},
        {"ev": "not_watched", "pid": 1, "site": None, "reason": "traced by torch.compile",
         "lines": [[os.path.realpath("m.py"), 12], [os.path.realpath("m.py"), 30]]},
        call_event(1, 40, target_row=20),
        {"ev": "compare", "pid": 1, "call": 1, "phase": "replay", "match": False,
         "matters": True, "kind": "ops", "text": "ran cos where the forward ran sin (op #2)"},
    ])
    never_ran = finding("CKP303", 62, site_row=70, target_row=60)
    judged = judge_all([static, finding("CKP303", 12), never_ran], obs, run=RunInfo(returncode=0))
    verdicts = {(f.code, f.start.row): f for f in judged}
    assert verdicts["CKP105", 1].verdict == "static-only"
    # Only the finding whose lines the compiled graph was traced from ran compiled.
    compiled = verdicts["CKP303", 12]
    assert compiled.verdict == "error" and "torch.compile" in compiled.evidence
    eager = verdicts["CKP303", 62]
    assert eager.verdict == "unexercised" and "never called" in eager.evidence
    assert "torch.compile was used at m.py:2" in eager.evidence
    verdicts = {f.code: f for f in judged}
    assert verdicts["CKP501"].verdict == "confirmed"
    assert verdicts["CKP501"].start.row == 40
    assert "ran cos where the forward ran sin" in verdicts["CKP501"].evidence


def test_exit_status_rules():
    assert exit_status([], RunInfo(returncode=3)) == 2
    assert exit_status([], RunInfo(start_error="nope")) == 2
    assert exit_status([], RunInfo(returncode=0)) == 0


def test_state_specs_come_from_data_never_from_the_message():
    plan = build_plan([finding("CKP201", 1, "SCALE")])
    assert plan["specs"][0]["expr"] == "SCALE" and plan["specs"][0]["cls"] is None
    attribute = finding("CKP201", 1, "self.cache")
    assert attribute.data["owner"] == "m.Block"
    [spec] = build_plan([attribute])["specs"]
    assert spec["expr"] == "self.cache" and spec["cls"] == "m.Block"
    # A message naming other state changes nothing; data naming none gives no state to read.
    worded = replace(attribute, message="reads `OTHER` and `self.other`")
    assert build_plan([worded]) == build_plan([attribute])
    unreadable = replace(attribute, data={**attribute.data, "state": "self.items()[0]"})
    assert build_plan([unreadable]) == {"specs": []}
    # Side effects: the line is traced; print and logging have no state to read.
    printed = finding("CKP401", 7, "print")
    printed = replace(printed, data={**printed.data, "effect": "output"})
    [spec] = build_plan([printed])["specs"]
    assert spec["expr"] is None and spec["line"][1] == 7
    # A write outside the process (`torch.save`) names a function, not state to read.
    saved = finding("CKP401", 9, "torch.save")
    saved = replace(saved, data={**saved.data, "effect": "io"})
    [spec] = build_plan([saved])["specs"]
    assert spec["expr"] is None and spec["line"][1] == 9


def test_a_hazard_reported_at_its_site_is_watched_at_its_own_line():
    """A hazard in a file that was not linted is reported at the site; `data.hazard` keeps
    where it is, for the file whose globals hold the state and the line to trace."""
    import os
    moved = finding("CKP401", 30, "COUNT")
    moved = replace(moved, data={**moved.data, "hazard": {"filename": "lib/blocks.py",
                                                          "row": 12}})
    [spec] = build_plan([moved])["specs"]
    assert spec["file"] == os.path.realpath("lib/blocks.py")
    assert spec["line"] == [os.path.realpath("lib/blocks.py"), 12]


def test_missing_internals_give_error_verdicts(tmp_path):
    obs = observations(tmp_path, [
        {"ev": "start", "pid": 1, "errors": {"non-reentrant": "torch 9.9 lacks _checkpoint_hook"}}])
    judged = judge_all([finding("CKP201", 12, "SCALE")], obs, run=RunInfo(returncode=0))
    assert judged[0].verdict == "error" and "lacks _checkpoint_hook" in judged[0].evidence


def _replayed(cid, row, matters=False):
    return [call_event(cid, row), {"ev": "pass", "pid": 1, "call": cid, "phase": "forward"},
            {"ev": "pass", "pid": 1, "call": cid, "phase": "replay"},
            {"ev": "compare", "pid": 1, "call": cid, "phase": "replay", "match": not matters,
             "matters": matters, "kind": "saved-value" if matters else "match",
             "text": "saved a different tanh output" if matters else "matched"}]


def test_a_segment_reached_from_two_sites(tmp_path):
    from ckptlint.findings import SiteRecord
    target = TargetRef("m.py", 10, "Block.forward")
    sites = [SiteRecord(SiteRef("m.py", 30, 5), (target,), "checkpoint", "non-reentrant"),
             SiteRecord(SiteRef("m.py", 40, 5), (target,), "checkpoint", "non-reentrant")]
    f = finding("CKP201", 12, "SCALE")
    both = observations(tmp_path, [{"ev": "start", "pid": 1}, *_replayed(1, 30), *_replayed(2, 40)])
    [judged] = judge_all([f], both, sites, RunInfo(returncode=0))
    assert judged.verdict == "cleared" and "2 times at m.py:30, m.py:40" in judged.evidence
    one = observations(tmp_path, [{"ev": "start", "pid": 1}, *_replayed(1, 30)])
    [judged] = judge_all([f], one, sites, RunInfo(returncode=0))
    assert judged.verdict == "unexercised" and "m.py:40 never ran a replay" in judged.evidence
    bad = observations(tmp_path, [{"ev": "start", "pid": 1}, *_replayed(1, 30),
                                  *_replayed(2, 40, matters=True)])
    [judged] = judge_all([f], bad, sites, RunInfo(returncode=0))
    assert judged.verdict == "confirmed" and "at m.py:40" in judged.evidence


def _state_run(tmp_path, f, forward, replay, matters):
    sid = str(build_plan([f])["specs"][0]["id"])
    return observations(tmp_path, [
        {"ev": "start", "pid": 1}, call_event(1, 30),
        {"ev": "pass", "pid": 1, "call": 1, "phase": "forward", "state": {sid: forward}},
        {"ev": "pass", "pid": 1, "call": 1, "phase": "replay", "state": {sid: replay}},
        {"ev": "compare", "pid": 1, "call": 1, "phase": "replay", "match": not matters,
         "matters": matters, "kind": "saved-value" if matters else "match",
         "text": "saved a different tanh output" if matters else "matched"}])


def test_state_that_could_not_be_read_never_clears_a_divergence(tmp_path):
    """Two equal unreadable summaries (a container too large to digest) are no evidence that
    the state stayed the same: the divergence is judged without them."""
    f = finding("CKP201", 12, "SCALE")
    too_large = "<unreadable list of length 9000: more than 256 values>"
    obs = _state_run(tmp_path, f, [too_large, too_large], [too_large, too_large], matters=True)
    [judged] = judge_all([f], obs, run=RunInfo(returncode=0))
    assert judged.verdict != "cleared", judged.evidence
    assert "did not change" not in judged.evidence
    assert f"`SCALE` could not be compared: {too_large}" in judged.evidence
    readable = _state_run(tmp_path, f, ["list [1.0]", "list [1.0]"], ["list [1.0]", "list [1.0]"],
                          matters=True)
    judged, ckp501 = judge_all([f], readable, run=RunInfo(returncode=0))
    assert judged.verdict == "cleared" and "did not change between forward" in judged.evidence
    assert ckp501.code == "CKP501"  # the divergence is reported, not explained by SCALE


def test_state_change_between_readable_summaries_confirms(tmp_path):
    f = finding("CKP201", 12, "SCALE")
    obs = _state_run(tmp_path, f, ["list [1.0]", "list [1.0]"], ["list [0.5]", "list [0.5]"],
                     matters=True)
    [judged] = judge_all([f], obs, run=RunInfo(returncode=0))
    assert judged.verdict == "confirmed"
    assert "`SCALE` changed between forward and backward (list [1.0] → list [0.5])" in judged.evidence
