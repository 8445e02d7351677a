"""Profile aggregation without torch: site keys, the keep/drop/fix rule, the text table."""

from __future__ import annotations

import os

import pytest

from ckptlint.dynamic.profile.report import SiteKeys, build_report, human_bytes
from ckptlint.findings import SiteRecord
from ckptlint.findings import SiteRef, TargetRef
from ckptlint.dynamic.profile.table import plot_install_message, render_text

MIB = 1024 * 1024


def _model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("class Block:\n    def forward(self, x):\n        return x\n")
    return str(path)


def _site(path, row, api="torch.utils.checkpoint.checkpoint", target_row=2):
    return SiteRecord(SiteRef(path, row, 5), (TargetRef(path, target_row, "Block.forward"),),
                      api, "non-reentrant")


def _events(path, calls):
    """calls: [(site row or None, replay bytes, preserve, diverged)]"""
    real = os.path.realpath(path)
    out = [{"ev": "start", "pid": 1}]
    for i, (row, nbytes, preserve, diverged) in enumerate(calls, 1):
        out.append({"ev": "call", "pid": 1, "id": i, "mode": "non-reentrant",
                    "site": [real, row, 5] if row else [real, 99, 1],
                    "targets": [[real, 2, "Block.forward"]], "grad": True,
                    "preserve_rng_state": preserve})
        out.append({"ev": "pass", "pid": 1, "call": i, "phase": "forward", "seconds": 0.002,
                    "bytes": nbytes, "saved": 2})
        out.append({"ev": "pass", "pid": 1, "call": i, "phase": "replay", "seconds": 0.001,
                    "bytes": nbytes, "saved": 2, "matters": diverged,
                    "text": "saved tensor #1 (float32[2]) has other values than in the forward"
                    if diverged else "matched"})
    return out


def test_direct_calls_key_by_site_and_wrapper_calls_by_target(tmp_path):
    path = _model(tmp_path)
    keys = SiteKeys([_site(path, 10), _site(path, 20, api="x.checkpoint_wrapper")])
    report = build_report(_events(path, [(10, 4 * MIB, True, False), (None, 2 * MIB, True, False)]),
                          keys)
    rows = {s.site[1]: s for s in report.sites}
    assert set(rows) == {10, 20}          # the library-made call joins the wrapper site
    assert rows[10].bytes_per_call == 4 * MIB


def test_ambiguous_wrapper_call_stays_at_its_runtime_position(tmp_path):
    path = _model(tmp_path)
    keys = SiteKeys([_site(path, 20, api="a.wrapper"), _site(path, 30, api="b.wrapper")])
    report = build_report(_events(path, [(None, 2 * MIB, True, False)]), keys)
    assert [s.site[1] for s in report.sites] == [99]


def test_keep_drop_fix(tmp_path):
    path = _model(tmp_path)
    keys = SiteKeys([_site(path, 10), _site(path, 20), _site(path, 30)])
    report = build_report(_events(path, [(10, 4 * MIB, True, False), (20, 1000, True, False),
                                         (30, 8 * MIB, False, True)]), keys)
    records = {r["site"]["row"]: r for r in report.records(MIB)}
    assert (records[10]["recommendation"], records[10]["code"]) == ("keep", None)
    assert (records[20]["recommendation"], records[20]["code"]) == ("drop", "CKP502")
    assert (records[30]["recommendation"], records[30]["code"]) == ("fix", "CKP501")
    assert "preserve_rng_state=False" in records[30]["reason"]
    # the threshold is the config's
    assert {r["site"]["row"]: r for r in report.records(100)}[20]["recommendation"] == "keep"
    assert [r["site"]["row"] for r in report.records(MIB)] == [30, 10, 20]


def test_grad_difference_beyond_tolerance_is_fix(tmp_path):
    path = _model(tmp_path)
    events = _events(path, [(10, 4 * MIB, True, False)])
    events.append({"ev": "grad", "pid": 1, "call": 1, "diff": 0.25, "close": False})
    record = build_report(events, SiteKeys([_site(path, 10)])).records(MIB)[0]
    assert (record["recommendation"], record["code"]) == ("fix", "CKP501")
    assert record["grad_max_abs_diff"] == 0.25
    assert "differ from a plain run" in record["reason"]


def test_text_table_has_totals_and_reasons(tmp_path):
    path = _model(tmp_path)
    report = build_report(_events(path, [(10, 4 * MIB, True, False), (10, 4 * MIB, True, False),
                                         (20, 1000, True, False)]),
                          SiteKeys([_site(path, 10), _site(path, 20)]))
    text = render_text(report.records(MIB), notes=["a note"], command_seconds=2.0)
    lines = text.splitlines()
    assert lines[0].split() == ["site", "module", "calls", "freed/call", "kept/call",
                                "forward/call", "recompute/call", "grad", "diff", "peak", "saved",
                                "call"]
    assert lines[2].startswith(f"{path}:10:5") and lines[3].startswith(f"{path}:20:5")
    total = next(line for line in lines if line.startswith("total (whole run)"))
    assert "8.0 MiB" in total and "1 keep, 1 drop" in total
    assert f"{path}:20:5: drop (CKP502): frees only" in text
    assert text.rstrip().endswith("a note")
    assert human_bytes(1536) == "1.5 KiB"


def test_plot_message_names_the_install_command():
    message = plot_install_message()
    assert "-m pip install matplotlib" in message and "--plot" in message


@pytest.mark.slow
def test_cuda_path_defers_results_in_order(tmp_path):
    """CUDA timing and checksums resolved after the fact (a fake torch.cuda.Event on CPU)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "events.jsonl"
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "scripts" / "fake_cuda.py"),
                           str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PENDING 0" in proc.stdout.splitlines()[-1]
    assert int(proc.stdout.splitlines()[0].split()[1]) > 0      # something was deferred
    events = [json.loads(line) for line in out.read_text().splitlines()]
    passes = [e for e in events if e["ev"] == "pass"]
    assert len(passes) == 12 and all(e["timer"] == "cuda" for e in passes)
    calls = {e["id"]: i % 2 for i, e in enumerate(e for e in events if e["ev"] == "call")}
    replays = [e for e in passes if e["phase"] == "replay"]
    assert [e["match"] for e in replays if calls[e["call"]] == 0] == [True] * 3
    assert [e["match"] for e in replays if calls[e["call"]] == 1] == [False] * 3


def test_class_rollup_in_the_text_table():
    from ckptlint.dynamic.profile.table import render_text
    records = [{"site": {"filename": "t.py", "row": 5, "column": 9}, "module": f"model.layers.{i}",
                "class": "LlamaDecoderLayer", "calls": 2,
                "activation_bytes_freed_per_call": 2 * 1024 * 1024, "input_bytes_kept_per_call": 1024,
                "policy_bytes_kept_per_call": 0, "forward_seconds_per_call": 0.001,
                "recompute_seconds_per_call": 0.002, "grad_max_abs_diff": None,
                "peak_bytes_saved": None, "recommendation": "keep", "code": None,
                "reason": "frees"} for i in range(3)]
    text = render_text(records)
    lines = text.splitlines()
    assert any(line.split()[:3] == ["t.py:5:9", "model.layers.2", "2"] for line in lines), text
    rollup = lines.index("By class of checkpointed module:")
    assert lines[rollup + 1].split() == ["class", "modules", "calls", "freed/call", "freed",
                                         "in", "all", "recompute", "in", "all", "call"]
    row = lines[rollup + 3].split()
    assert row[:5] == ["LlamaDecoderLayer", "3", "6", "2.0", "MiB"]
    assert row[5:7] == ["12.0", "MiB"] and row[-2:] == ["3", "keep"]
    assert "t.py:5:9 model.layers.0: keep: frees" in text


def test_policy_saves_most_recompute_per_byte_within_the_budget_never_random_ops():
    from ckptlint.dynamic.profile.advice import policy_code, suggest_policy
    from ckptlint.dynamic.profile.report import SiteProfile
    site = SiteProfile(("t.py", 1, 1))
    #          name                      count  bytes      seconds random collective mutated
    site.ops = [["aten.mm.default",          2, 576 * 1024, 0.004, False, False, False],
                ["aten.gelu.default",        1, 512 * 1024, 0.001, False, False, False],
                ["aten.native_dropout.default", 1, 8 * 1024, 0.009, True, False, False],
                ["_c10d_functional.all_reduce.default", 1, 4 * 1024, 0.02, False, True, False],
                ["aten.empty_like.default",  1, 8 * 1024,   0.5,   False, False, True],
                ["aten.view.default",        3, 0,          0.0,   False, False, False]]
    policy = suggest_policy(site, 600 * 1024)
    assert policy["save"] == ["aten.mm.default"]
    assert policy["predicted_bytes_kept_per_call"] == 576 * 1024
    assert policy["never_saved"] == ["_c10d_functional.all_reduce.default",
                                     "aten.empty_like.default", "aten.native_dropout.default"]
    assert suggest_policy(site, 100 * 1024)["save"] == []        # nothing fits
    assert suggest_policy(site, 2 * 1024 * 1024)["save"] == ["aten.gelu.default", "aten.mm.default"]
    code = policy_code(policy["save"])
    compile(code, "<policy>", "exec")                 # valid Python, ready to paste
    assert "SAVE = {torch.ops.aten.mm.default}" in code


@pytest.mark.parametrize("text, expected", [("1048576", 1048576), ("512KiB", 512 * 1024),
                                            ("1.5MiB", 3 * 512 * 1024), ("2 GiB", 2 << 30),
                                            ("64k", 65536)])
def test_memory_budget_sizes(text, expected):
    from ckptlint.dynamic.profile.cli import ByteSize
    assert ByteSize().convert(text, None, None) == expected


@pytest.mark.parametrize("bad", ["lots", "-5MiB", "5 parsecs", "0"])
def test_bad_memory_budget_is_a_usage_error(bad):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "ckptlint", "profile", "--memory-budget", bad,
                           "--", sys.executable, "-c", "pass"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "is not a size in bytes" in proc.stderr and "Traceback" not in proc.stderr


def test_verify_needs_a_memory_budget():
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "ckptlint", "profile", "--verify", "--",
                           sys.executable, "-c", "pass"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "give --memory-budget too" in proc.stderr


def _layers_report(**counts):
    from ckptlint.dynamic.profile.report import Report
    return Report([], [], {}, True, layers={"GPT2Block": {"calls": 4, **counts}})


@pytest.mark.parametrize("counts, reason", [
    ({"flag_on": 4, "training": 4, "grad": 0}, "every call ran with gradients off"),
    ({"flag_on": 4, "training": 0, "grad": 4}, "ran in eval() mode"),
    ({"flag_on": 0, "training": 4, "grad": 4}, "the gradient_checkpointing flag is off on every "
                                               "GPT2Block that ran"),
])
def test_checkpointing_off_names_the_likely_reason(counts, reason):
    from ckptlint.dynamic.profile.advice import checkpointing_off
    alarm = checkpointing_off(_layers_report(**counts), static_sites=0)
    assert alarm.startswith("checkpointing is not on: GPT2Block layers ran")
    assert reason in alarm


def test_no_alarm_without_sites_or_layers(tmp_path):
    from ckptlint.dynamic.profile.advice import checkpointing_off
    from ckptlint.dynamic.profile.report import Report
    assert checkpointing_off(Report([], [], {}, True), static_sites=0) is None
    path = _model(tmp_path)
    from ckptlint.dynamic.profile.report import ModuleTotals
    inference = Report([], [], {}, True)            # no module ran with gradients on
    assert "no module ran with gradients on" in checkpointing_off(inference, static_sites=1)
    gated = Report([], [], {}, True, modules={("Net", ""): ModuleTotals("", "Net", 2, 0, 0)})
    alarm = checkpointing_off(gated, static_sites=1)
    assert alarm.startswith("checkpointing is not on: the static pass found 1 checkpoint site,")
    assert "gated by a condition that was false in this run" in alarm
    ran = build_report(_events(path, [(10, 4 * MIB, True, False)]), SiteKeys([_site(path, 10)]))
    assert checkpointing_off(ran, static_sites=1) is None
