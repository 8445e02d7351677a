"""`ckptlint profile` end to end: real torch on CPU, real child processes.

The expected bytes are computed here independently: a plain (uncheckpointed) run of the same
segment under `saved_tensors_hooks`, distinct storages, minus inputs, parameters and buffers.
The profiled commands that the selected tests declare start together (two at a time) to keep
the suite short.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.profile.helpers import (MIB, PY, SCRIPTS, _env, close_to, expected_bytes, profile,
                                   row as _row)

torch = pytest.importorskip("torch")

_CONFIG = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
_CONFIG.write("profile-min-bytes-freed = 1024\n")
_CONFIG.close()

SCENARIOS = {
    "clean": (("--format", "json", "."), (PY, "encoder.py", "3")),
    "grad": (("--format", "json", "--grad-check", "."), (PY, "encoder.py", "3", "dropout")),
    "reentrant": (("--format", "json", "--grad-check", "--config", _CONFIG.name, "."),
                  (PY, "encoder.py", "2", "dropout", "reentrant")),
    "text": (("--measure-peak", "."), (PY, "encoder.py", "2")),
    "failed": (("--format", "json"), (PY, "-c", "import sys; sys.exit(3)")),
}


@pytest.fixture(scope="module")
def runs(selected_scenarios):
    """The scenarios the selected tests declare (`@pytest.mark.scenarios`), two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(profile, *args, command=cmd)
               for name, (args, cmd) in SCENARIOS.items() if name in selected_scenarios}
    os.unlink(_CONFIG.name)


# --------------------------------------------------------------------------- expected numbers

@pytest.fixture(scope="module")
def expected():
    sys.path.insert(0, str(SCRIPTS))
    try:
        import encoder
    finally:
        sys.path.remove(str(SCRIPTS))
    model = encoder.build(dropout=True)
    h = torch.randn(encoder.BATCH, encoder.LENGTH, encoder.DIM, requires_grad=True)
    pooled = torch.randn(encoder.BATCH, encoder.DIM, requires_grad=True)
    return {
        "ff": expected_bytes(model.ff, [h], [model.ff]),
        "squash": expected_bytes(encoder.squash, [pooled], []),
        "noisy": expected_bytes(model.noisy, [pooled], [model.noisy]),
    }


# --------------------------------------------------------------------------- tests

@pytest.mark.scenarios("clean")
def test_bytes_freed_match_an_independent_computation(runs, expected):
    r = runs["clean"].result()
    assert r.rc == 0, r.stderr[-3000:]
    ff, squash = r.site("ff"), r.site("squash")
    assert expected["ff"] >= 4 * MIB and expected["squash"] < 64 * 1024
    assert close_to(ff["activation_bytes_freed_per_call"], expected["ff"]), (ff, expected)
    assert close_to(squash["activation_bytes_freed_per_call"], expected["squash"]), (squash, expected)
    assert ff["calls"] == squash["calls"] == 3


@pytest.mark.scenarios("clean")
def test_big_segment_is_kept_and_trivial_one_dropped(runs):
    r = runs["clean"].result()
    ff, squash = r.site("ff"), r.site("squash")
    assert (ff["recommendation"], ff["code"]) == ("keep", None)
    assert (squash["recommendation"], squash["code"]) == ("drop", "CKP502")
    assert "below profile-min-bytes-freed (1.0 MiB)" in squash["reason"]
    # timings are wall-clock medians on a shared machine: only their presence is checked
    for record in (ff, squash):
        assert record["forward_seconds_per_call"] > 0 and record["recompute_seconds_per_call"] > 0


@pytest.mark.scenarios("clean")
def test_json_contract(runs):
    records = runs["clean"].result().records
    keys = {"site", "module", "class", "calls", "activation_bytes_freed_per_call",
            "input_bytes_kept_per_call", "policy_bytes_kept_per_call", "forward_seconds_per_call",
            "recompute_seconds_per_call", "grad_max_abs_diff", "peak_bytes_saved",
            "suggested_policy", "recommendation", "code", "reason"}
    for record in records:
        assert set(record) == keys
        assert set(record["site"]) == {"filename", "row", "column"}
        assert record["site"]["filename"] == "encoder.py"
        assert record["grad_max_abs_diff"] is None      # no --grad-check
        assert record["peak_bytes_saved"] is None       # CPU, no --measure-peak
        assert record["suggested_policy"] is None       # no --memory-budget
        assert isinstance(record["activation_bytes_freed_per_call"], int)
    freed = [r["activation_bytes_freed_per_call"] for r in records]
    assert freed == sorted(freed, reverse=True)


@pytest.mark.slow
@pytest.mark.scenarios("grad")
def test_grad_check_clean_is_zero_and_unpreserved_dropout_differs(runs, expected):
    r = runs["grad"].result()
    assert r.rc == 1, r.stderr[-3000:]      # a site called fix
    ff, noisy = r.site("ff"), r.site("noisy")
    assert ff["grad_max_abs_diff"] is not None and ff["grad_max_abs_diff"] <= 1e-6
    assert ff["recommendation"] == "keep"
    assert noisy["grad_max_abs_diff"] > 1e-3
    assert (noisy["recommendation"], noisy["code"]) == ("fix", "CKP501")
    assert "preserve_rng_state=False" in noisy["reason"]
    assert close_to(noisy["activation_bytes_freed_per_call"], expected["noisy"])
    assert "side effects" in r.stderr and "ran again" in r.stderr


@pytest.mark.slow
def test_profiling_does_not_change_the_program(runs):
    """The extra runs of --grad-check fork every RNG and put back the list the feed-forward
    appends its auxiliary loss to: the loss is the one of a plain run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "loss")
        env = dict(_env(), CKPT_TEST_OUT=out)
        subprocess.run([PY, "encoder.py", "3", "dropout"], cwd=SCRIPTS, env=env, check=True,
                       capture_output=True, timeout=120)
        plain = Path(out).read_text()
        cmd = [PY, "-m", "ckptlint", "profile", "--grad-check", "--format", "json", "--",
               PY, "encoder.py", "3", "dropout"]
        proc = subprocess.run(cmd, cwd=SCRIPTS, env=env, capture_output=True, timeout=120)
        assert proc.returncode == 1, proc.stderr[-3000:]   # the dropout segment: fix
        assert Path(out).read_text() == plain


@pytest.mark.slow
@pytest.mark.scenarios("reentrant")
def test_reentrant_bytes_from_the_replay_and_grad_check_finds_dropout(runs, expected):
    r = runs["reentrant"].result()
    assert r.rc == 1, r.stderr[-3000:]      # a site called fix
    ff, squash, noisy = r.site("ff"), r.site("squash"), r.site("noisy")
    assert close_to(ff["activation_bytes_freed_per_call"], expected["ff"])
    assert close_to(squash["activation_bytes_freed_per_call"], expected["squash"])
    # profile-min-bytes-freed = 1024 from --config: the 2 KiB segment is kept now
    assert squash["recommendation"] == "keep", squash
    assert ff["grad_max_abs_diff"] <= 1e-6
    # a reentrant forward saves nothing to compare: only the gradient check sees the replay
    assert noisy["grad_max_abs_diff"] > 1e-3
    assert (noisy["recommendation"], noisy["code"]) == ("fix", "CKP501")
    assert "differ from a plain run" in noisy["reason"]


@pytest.mark.slow
@pytest.mark.scenarios("text")
def test_text_table_sorted_with_totals(runs):
    r = runs["text"].result()
    assert r.rc == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["site", "module", "calls", "freed/call", "kept/call"]
    ff_row = next(i for i, line in enumerate(lines) if line.startswith(f"encoder.py:{_row('ff')}:"))
    squash_row = next(i for i, line in enumerate(lines)
                      if line.startswith(f"encoder.py:{_row('squash')}:"))
    assert ff_row < squash_row
    assert "4.0 MiB" in lines[ff_row] and lines[ff_row].rstrip().endswith("keep")
    assert lines[squash_row].rstrip().endswith("drop (CKP502)")
    total = next(line for line in lines if line.startswith("total (whole run)"))
    assert re.search(r"\s4\s+\d", total), total        # 2 sites x 2 calls
    assert "1 keep, 1 drop" in total
    # no CUDA here: --measure-peak measures nothing and says so
    assert "--measure-peak measured nothing" in r.stdout and "peak_bytes_saved is null" in r.stdout


@pytest.mark.slow
@pytest.mark.scenarios("failed")
def test_failed_command_exits_2(runs):
    r = runs["failed"].result()
    assert r.rc == 2
    assert r.records == []
    assert "exited with status 3" in r.stderr


def test_command_that_cannot_start_exits_2():
    r = profile(command=("no-such-command-ckptlint",))
    assert r.rc == 2
    assert "could not start" in r.stderr


def test_missing_command_is_a_usage_error():
    r = profile(".")
    assert r.rc == 2
    assert "give the command to run after `--`" in r.stderr


def test_plot_without_matplotlib_says_how_to_install(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        r = profile("--plot", str(tmp_path / "p.png"), command=(PY, "encoder.py", "1"))
        assert r.rc == 2
        assert "pip install matplotlib" in r.stderr and "--plot needs matplotlib" in r.stderr
        assert not (tmp_path / "p.png").exists()
    else:
        r = profile("--plot", str(tmp_path / "p.png"), ".", command=(PY, "encoder.py", "1"))
        assert r.rc == 0, r.stderr[-2000:]
        assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
