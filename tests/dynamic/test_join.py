"""One way of matching run-time calls to static sites, for dynamic mode and profile alike
(ckptlint.dynamic.join; hand-made events, no torch)."""

from __future__ import annotations

import json
import os

from ckptlint.dynamic.join import SiteIndex, code_rows
from ckptlint.dynamic.profile.report import SiteKeys, build_report
from ckptlint.dynamic.verdicts import Observations, RunInfo, judge_all
from ckptlint.findings import Finding, Position, SiteRecord, SiteRef, TargetRef

from dynhelp import MESSAGE, finding_data

WRAPPER = "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper"
DIRECT = "torch.utils.checkpoint.checkpoint"


def _model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("class Block:\n    @staticmethod\n    def forward(x):\n        return x\n")
    return str(path)


def _site(path, row, api):
    # The target's row is the code object's first line: the decorator's (2), not the def's.
    return SiteRecord(SiteRef(path, row, 5), (TargetRef(path, 2, "Block.forward"),), api,
                      "non-reentrant")


def _events(path, calls):
    """calls: [(runtime row, diverged)]; events both dynamic mode and profile read."""
    real = os.path.realpath(path)
    out = [{"ev": "start", "pid": 1}]
    for i, (row, diverged) in enumerate(calls, 1):
        text = "saved a different tanh output" if diverged else "matched"
        out += [
            {"ev": "call", "pid": 1, "id": i, "mode": "non-reentrant", "site": [real, row, 5],
             "targets": [[real, 2, "Block.forward"]], "grad": True, "preserve_rng_state": True},
            {"ev": "pass", "pid": 1, "call": i, "phase": "forward", "seconds": 0.001,
             "bytes": 1000, "saved": 1},
            {"ev": "pass", "pid": 1, "call": i, "phase": "replay", "seconds": 0.001,
             "bytes": 1000, "saved": 1, "matters": diverged, "text": text},
            {"ev": "compare", "pid": 1, "call": i, "phase": "replay", "match": not diverged,
             "matters": diverged, "kind": "saved-value" if diverged else "match", "text": text},
        ]
    return out


def _finding(path, site_row):
    """A finding that belongs to one site only (no chain shared with other sites)."""
    target = TargetRef(path, 2, "Block.forward")
    return Finding("CKP201", MESSAGE, path, Position(4, 9), Position(4, 10),
                   site=SiteRef(path, site_row, 5), chain=(), target=target,
                   data=finding_data("CKP201", path, "SCALE", target, site_row))


def _verdicts(tmp_path, path, sites, events, rows):
    log = tmp_path / "obs.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    judged = judge_all([_finding(path, row) for row in rows], Observations.load(str(log)),
                       sites, RunInfo(returncode=0), ckp501=False)
    return {f.site.row: f.verdict for f in judged}


def _profile_rows(sites, events):
    report = build_report(events, SiteKeys(sites))
    return {s.site[1]: s.divergence()[0] for s in report.sites}


def test_a_library_call_joins_the_wrapper_site_in_both(tmp_path):
    """`checkpoint(block)` at row 10 and `checkpoint_wrapper(block)` at row 20 checkpoint the
    same function; a call from library code (runtime row 99) is the wrapper's: row 10 was
    reached directly and is a plain checkpoint call, which never calls from a library."""
    path = _model(tmp_path)
    sites = [_site(path, 10, DIRECT), _site(path, 20, WRAPPER)]
    events = _events(path, [(10, False), (99, True)])
    assert _verdicts(tmp_path, path, sites, events, [10, 20]) == {10: "cleared", 20: "confirmed"}
    assert _profile_rows(sites, events) == {10: 0, 20: 1}


def test_a_call_the_run_cannot_place_is_not_given_to_one_site(tmp_path):
    """Two wrapper sites of one function: profile keeps the call at its runtime position,
    and dynamic mode judges both sites' findings by it (either may have made it)."""
    path = _model(tmp_path)
    sites = [_site(path, 20, WRAPPER), _site(path, 30, WRAPPER)]
    events = _events(path, [(99, True)])
    verdicts = _verdicts(tmp_path, path, sites, events, [20, 30])
    assert verdicts == {20: "confirmed", 30: "confirmed"}
    assert _profile_rows(sites, events) == {99: 1}


def test_a_decorated_function_joins_by_its_def_line_too(tmp_path):
    """A code object's first line is its decorator's; a static target may name the def."""
    path = _model(tmp_path)
    real = os.path.realpath(path)
    assert code_rows(real, 2) == {2, 3}
    index = SiteIndex()
    index.add(SiteRef(path, 20, 5), [TargetRef(path, 3, "Block.forward")], WRAPPER)
    [found] = index.sites_of((real, 99, 1), [(real, 2, "Block.forward")])
    assert found.position == (path, 20, 5)
