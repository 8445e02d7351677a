"""Dynamic mode end to end: real torch, real child processes, ground truth from gradients."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from dynhelp import PY, SCRIPTS, env_with_root, findings_for, plain_python, run_dynamic

pytest.importorskip("torch")


def differs(values) -> bool:
    return values["plain"] != values["ckpt"]


# --------------------------------------------------------------------------- hazard families

@pytest.mark.scenarios("state_read_harmful")
def test_global_read_confirmed_when_it_corrupts_the_replay(runs):
    r = runs["state_read_harmful"]
    assert differs(r.values), "ground truth: the checkpointed gradients must be wrong"
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert f"replay of block() at state_read.py:{_row('state_read.py', 'ckpt-site: A')} " in f["evidence"]
    assert "saved a different tanh output" in f["evidence"]
    assert "`SCALE` changed between forward and backward (1.0 → 3.0)" in f["evidence"]
    assert r.rc == 1
    assert not r.by_code("CKP501")


@pytest.mark.slow
@pytest.mark.scenarios("state_read_harmless")
def test_global_read_cleared_when_changed_only_after_backward(runs):
    r = runs["state_read_harmless"]
    assert not differs(r.values)
    f = r.one("CKP201")
    assert f["verdict"] == "cleared", f
    site = _row("state_read.py", "ckpt-site: A")
    assert f["evidence"].startswith(f"replay matched the forward 2 times at state_read.py:{site}")
    assert "`SCALE` did not change between forward and replay" in f["evidence"]
    assert r.rc == 0


@pytest.mark.slow
@pytest.mark.scenarios("state_read_reentrant")
def test_reentrant_replay_compares_op_outputs(runs):
    r = runs["state_read_reentrant"]
    assert differs(r.values)
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert "returned a different value" in f["evidence"]


@pytest.mark.slow
@pytest.mark.scenarios("state_branch_harmful", "state_branch_harmless")
def test_state_branch_flip_confirmed_and_cleared(runs):
    r = runs["state_branch_harmful"]
    assert differs(r.values)
    f = r.one("CKP204")
    assert f["verdict"] == "confirmed", f
    assert "saved a sigmoid output where the forward saved a tanh output" in f["evidence"]
    assert "`self.use_tanh` changed between forward and backward (True → False)" in f["evidence"]
    h = runs["state_branch_harmless"]
    assert not differs(h.values)
    assert h.one("CKP204")["verdict"] == "cleared"


@pytest.mark.slow
@pytest.mark.scenarios("data_branch_harmful", "data_branch_harmless")
def test_data_branch_and_foreign_rng(runs):
    r = runs["data_branch_harmful"]
    assert differs(r.values)
    assert r.one("CKP203")["verdict"] == "confirmed"
    assert r.one("CKP303")["verdict"] == "confirmed"
    h = runs["data_branch_harmless"]
    assert not differs(h.values)
    assert h.one("CKP203")["verdict"] == "cleared"
    assert h.one("CKP303")["verdict"] == "cleared"


@pytest.mark.slow
@pytest.mark.scenarios("data_branch_hard_exit")
def test_a_crash_after_the_replay_loses_nothing(runs):
    r = runs["data_branch_hard_exit"]
    assert r.one("CKP303")["verdict"] == "confirmed"
    assert r.rc == 1                       # confirmed wins over the failed command
    assert "exited with status 9" in r.stderr


@pytest.mark.slow
@pytest.mark.scenarios("rng_harmful", "rng_harmless")
def test_unpreserved_rng(runs):
    r = runs["rng_harmful"]
    assert differs(r.values)
    f = r.one("CKP302")
    assert f["verdict"] == "confirmed", f
    h = runs["rng_harmless"]
    assert not differs(h.values)
    assert h.one("CKP302")["verdict"] == "cleared"


@pytest.mark.slow
@pytest.mark.scenarios("side_effect_harmful")
def test_side_effect_confirmed_when_it_runs_again(runs):
    r = runs["side_effect_harmful"]
    assert r.values["ckpt"] == 2 * r.values["plain"], "ground truth: the counter runs twice"
    found = r.by_code("CKP401")
    first = next(f for f in found if f["location"]["row"] == _row("side_effect.py", "if HARMFUL:") + 1)
    assert first["verdict"] == "confirmed", found
    assert f"line {first['location']['row']} ran in the forward and again in the replay " \
           "(2 times and 2 times)" in first["evidence"]
    assert "`self.calls` changed in the forward (0 → 1) and again in the replay (1 → 2)" in \
        first["evidence"]
    other = next(f for f in found if f is not first)
    assert other["verdict"] == "cleared" and "did not run" in other["evidence"]


@pytest.mark.slow
@pytest.mark.scenarios("side_effect_harmless")
def test_side_effect_after_last_save_cleared_by_early_stop(runs):
    r = runs["side_effect_harmless"]
    assert r.values["ckpt"] == r.values["plain"]
    found = r.by_code("CKP401")
    assert {f["verdict"] for f in found} == {"cleared"}, found
    assert any("but never in the replay (early stop ended the replay before it)" in f["evidence"]
               for f in found), found


@pytest.mark.slow
@pytest.mark.scenarios("side_effect_reentrant")
def test_side_effect_reentrant_runs_twice(runs):
    r = runs["side_effect_reentrant"]
    assert r.values["ckpt"] == 2 * r.values["plain"]
    assert sorted(f["verdict"] for f in r.by_code("CKP401")) == ["cleared", "confirmed"]


@pytest.mark.slow
@pytest.mark.scenarios("reentrant_harmful", "reentrant_harmless")
def test_reentrant_confirmed_with_damage_and_cleared_at_run_time(runs):
    r = runs["reentrant_harmful"]
    assert r.values["plain"] != r.values["ckpt"] and r.values["ckpt"] == [None]
    f = r.one("CKP101")
    assert f["verdict"] == "confirmed"
    assert "ran in reentrant mode" in f["evidence"]
    assert "no input required grad" in f["evidence"] and "2 parameters got no gradient" in f["evidence"]
    h = runs["reentrant_harmless"]
    assert h.values["plain"] == h.values["ckpt"]
    assert h.one("CKP101")["verdict"] == "cleared"


@pytest.mark.slow
@pytest.mark.scenarios("device")
def test_device_move_on_this_machine(runs):
    r = runs["device"]
    f = r.one("CKP301")
    if r.values["device"] == "cpu":
        assert not differs(r.values)
        assert f["verdict"] == "cleared"
        assert "devices touched: cpu" in f["evidence"]
    else:  # pragma: no cover - GPU machine
        assert differs(r.values)
        assert f["verdict"] == "confirmed"


# --------------------------------------------------------------------------- lifecycle

@pytest.mark.slow
@pytest.mark.scenarios("lifecycle_forward_only")
def test_forward_without_backward_is_unexercised_and_uncalled_site_too(runs):
    r = runs["lifecycle_forward_only"]
    by_row = {f["location"]["row"]: f for f in r.by_code("CKP303")}
    assert all(f["verdict"] == "unexercised" for f in by_row.values()), by_row
    texts = sorted(f["evidence"] for f in by_row.values())
    assert any("was never called" in t for t in texts), texts
    assert any("never replayed" in t and "--replay-now" in t for t in texts), texts
    assert r.rc == 0


@pytest.mark.slow
@pytest.mark.scenarios("lifecycle_replay_now", "lifecycle_forward_only")
def test_replay_now_catches_eval_only_nondeterminism(runs):
    r = runs["lifecycle_replay_now"]
    scored = [f for f in r.by_code("CKP303") if f["target"]["qualname"] == "scored"]
    assert scored and scored[0]["verdict"] == "confirmed", r.findings
    assert "immediate rerun (--replay-now)" in scored[0]["evidence"]
    assert r.rc == 1
    # The extra call drew from Python `random`, but the program's own streams are untouched.
    assert r.values == runs["lifecycle_forward_only"].values


@pytest.mark.slow
@pytest.mark.scenarios("data_branch_replay_now", "data_branch_harmful")
def test_replay_now_with_grad_catches_foreign_rng_before_backward(runs):
    r = runs["data_branch_replay_now"]
    f = r.one("CKP303")
    assert f["verdict"] == "confirmed"
    # Confirmed by what the rerun saw (its draws and its saved tensors), before any backward.
    assert "immediate rerun (--replay-now) of block()" in f["evidence"], f
    assert "ckptlint: observer" not in r.stderr, "the rerun must not fail on any torch release"
    assert r.values == runs["data_branch_harmful"].values, "the rerun changed the program"


@pytest.mark.slow
@pytest.mark.scenarios("lifecycle_crash")
def test_crash_before_first_step(runs):
    r = runs["lifecycle_crash"]
    assert r.rc == 2
    assert {f["verdict"] for f in r.findings} == {"unexercised"}
    assert "exited with status 1" in r.stderr
    assert "config file missing" in r.stderr.split("last lines of its stderr")[-1]


@pytest.mark.slow
@pytest.mark.scenarios("lifecycle_fail")
def test_failing_command_still_prints_verdicts(runs):
    r = runs["lifecycle_fail"]
    assert r.rc == 2
    assert "exited with status 3" in r.stderr
    assert r.findings


def test_command_that_cannot_start():
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "findings.json"
        empty.write_text("[]")
        cmd = [PY, "-m", "ckptlint", "dynamic", "--findings", str(empty), "--",
               "/nonexistent/python-xyz", "x.py"]
        proc = subprocess.run(cmd, cwd=SCRIPTS, env=env_with_root(), capture_output=True,
                              text=True)
    assert proc.returncode == 2, proc.stderr
    assert "could not start" in proc.stderr


@pytest.mark.slow
@pytest.mark.scenarios("timeout")
def test_timeout_stops_the_command(runs):
    r = runs["timeout"]
    assert r.rc == 2
    assert "stopped at the time limit" in r.stderr
    assert r.seconds < 120  # the limit (60 s, room for a slow torch import) and the grace period
    assert "1 checkpoint sites seen, 1 calls watched" in r.stderr   # progress lines


# --------------------------------------------------------------------------- ways in

def _cli_rows(result, code="CKP501"):
    return {(f["location"]["row"], (f.get("target") or {}).get("qualname")) for f in result.by_code(code)}


def _row(script, needle):
    for row, line in enumerate((SCRIPTS / script).read_text().splitlines(), 1):
        if needle in line:
            return row
    raise AssertionError(needle)


@pytest.mark.slow
@pytest.mark.scenarios("wrappers", "wrappers_reentrant")
@pytest.mark.parametrize("name", ["wrappers", "wrappers_reentrant"])
def test_every_checkpoint_api_is_watched(runs, name):
    r = runs[name]
    rows = _cli_rows(r)
    expected = {
        (_row("wrappers.py", 'run("partial"'), "Block.forward"),
        (_row("wrappers.py", 'run("sequential"'), "Block.forward"),
        (_row("wrappers.py", "out = fn(x)"), "Block.forward"),       # wrapper, apply, composable
        (_row("wrappers.py", "return self._gradient_checkpointing_func("), "HFLayer.forward"),
    }
    assert expected <= rows, (rows, r.stderr[-2000:])
    assert all(f["verdict"] == "confirmed" for f in r.by_code("CKP501"))


@pytest.mark.slow
def test_each_wrapper_call_is_keyed_by_site_and_function():
    from ckptlint.dynamic.runner import run_watched

    sink = open(os.devnull, "w")
    watched = run_watched([PY, str(SCRIPTS / "wrappers.py")], output=sink,
                          env=env_with_root())
    calls = list(watched.observations.calls.values())
    assert watched.info.returncode == 0, watched.info.stderr_tail
    targets = [c.targets[0][2] for c in calls]
    # partial, sequential (1 checkpointed segment), wrapper, apply, composable, hf
    assert targets.count("Block.forward") == 5 and targets.count("HFLayer.forward") == 1
    assert all(c.passes.get("forward") == 1 and c.passes.get("replay") == 1 for c in calls)
    assert all(any(cmp["matters"] for cmp in c.compares) for c in calls)
    assert {c.mode for c in calls} == {"non-reentrant"}


# --------------------------------------------------------------------------- no behaviour change

@pytest.mark.slow
@pytest.mark.scenarios("rng_harmful")
def test_watching_changes_nothing_the_program_computes(runs):
    watched = runs["rng_harmful"].values
    plain = plain_python("unpreserved_rng.py")
    assert watched == plain     # gradients and the RNG stream after training


@pytest.mark.slow
def test_existing_sitecustomize_still_runs():
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "marker"
        (Path(tmp) / "sitecustomize.py").write_text(
            f"open({str(marker)!r}, 'w').write('ran')\n")
        r = run_dynamic("state_read.py", env={"PYTHONPATH": tmp + os.pathsep + str(SCRIPTS.parents[2])})
        assert marker.read_text() == "ran"
        assert r.one("CKP201")["verdict"] == "confirmed"


def test_cli_import_does_not_import_torch():
    code = "import sys, ckptlint.dynamic.cli, ckptlint.dynamic.verdicts, ckptlint.dynamic.runner; " \
           "print('torch' in sys.modules)"
    out = subprocess.run([PY, "-c", code], env=env_with_root(), capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_missing_torch_exits_2():
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "torch.py").write_text("raise ImportError('no torch here')\n")
        code = ("import importlib.util, sys; "
                "importlib.util.find_spec = lambda name, *a: None if name == 'torch' else "
                "__import__('importlib.machinery').machinery.PathFinder.find_spec(name); "
                "from ckptlint.cli import main; sys.argv = ['ckptlint', 'dynamic', '--findings', "
                f"{os.devnull!r}, '--', 'python', 'x.py']; main()")
        proc = subprocess.run([PY, "-c", code], env=env_with_root(), capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert "needs torch" in proc.stderr


def test_usage_error_without_command():
    proc = subprocess.run([PY, "-m", "ckptlint", "dynamic", "."], cwd=SCRIPTS, env=env_with_root(),
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--" in proc.stderr


@pytest.mark.slow
def test_observer_api_serves_a_profile_style_observer(tmp_path):
    """What profile reuses: bytes freed from the replay's packs, pass timings."""
    import json
    from ckptlint.dynamic.runner import run_watched

    out = tmp_path / "probe.jsonl"
    sink = open(os.devnull, "w")
    watched = run_watched([PY, str(SCRIPTS / "probe_train.py")], output=sink, record=False,
                          observers=["_probe_observer:make"],
                          env=env_with_root({"PROBE_OUT": str(out)}))
    assert watched.info.returncode == 0, watched.info.stderr_tail
    assert not watched.observations.calls            # record=False: no recorder events
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    # The replay packs x and W1 (first Linear), the relu output (relu saves its result),
    # and the relu output again with W2 (second Linear): one activation storage of
    # 8 x 64 float32 once x and the parameters are left out.
    assert row["bytes"] == 8 * 64 * 4, row
    assert row["seconds"] > 0 and row["args"] == 1 and row["early_stop"]
    assert row["site"][1] == _row("probe_train.py", "checkpoint(block")


# --------------------------------------------------------------------------- container state

def _container_run(mode):
    script = "state_container.py"
    site = "D" if mode == "dict" else "L"
    wanted = [f for f in findings_for(script) if f.site.row == _row(script, f"ckpt-site: {site}")]
    return run_dynamic(script, (mode,), findings=wanted)


def test_list_item_assigned_before_backward_confirmed():
    r = _container_run("list")
    assert differs(r.values), "ground truth: the checkpointed gradients must be wrong"
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert "`THRESHOLD` changed between forward and backward (list [1.0] → list [0.5])" \
        in f["evidence"], f["evidence"]
    assert r.rc == 1


def test_unchanged_list_cleared():
    r = _container_run("unchanged")
    assert not differs(r.values)
    f = r.one("CKP201")
    assert f["verdict"] == "cleared", f
    assert "`THRESHOLD` did not change between forward and replay" in f["evidence"], f["evidence"]
    assert r.rc == 0


def test_dict_value_assigned_before_backward_confirmed():
    r = _container_run("dict")
    assert differs(r.values)
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert "`CONFIG` changed between forward and backward" in f["evidence"], f["evidence"]
    assert "'scale': 0.5" in f["evidence"], f["evidence"]
    assert r.rc == 1


def test_object_attribute_assigned_before_backward_confirmed():
    """The finding names a module-level instance of a project class (`CFG`); only its
    attribute changes, the object keeps its identity."""
    r = run_dynamic("state_object.py", ("changed",))
    assert differs(r.values), "ground truth: the checkpointed gradients must be wrong"
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert ("`CFG` changed between forward and backward (Config(name='block', scale=1.0) → "
            "Config(name='block', scale=0.5))") in f["evidence"], f["evidence"]
    assert r.rc == 1


def test_unchanged_object_cleared():
    r = run_dynamic("state_object.py", ("unchanged",))
    assert not differs(r.values)
    f = r.one("CKP201")
    assert f["verdict"] == "cleared", f
    assert "`CFG` did not change between forward and replay" in f["evidence"], f["evidence"]
    assert r.rc == 0


def test_script_starting_with_a_lone_continuation_joins_its_site():
    """libcst leaves a lone `\\` line out of the code it numbers: the static site must still
    name the line the checkpoint call runs from, or the finding is never exercised."""
    r = run_dynamic("lone_continuation.py", lint=True)
    assert differs(r.values)
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    site = _row("lone_continuation.py", "out = checkpoint(")
    assert f"replay of block() at lone_continuation.py:{site} " in f["evidence"], f["evidence"]
    assert "`SCALE` changed between forward and backward (1.0 → 2.0)" in f["evidence"]


# --------------------------------------------------------------------------- notebooks

NOTEBOOK_CELLS = (
    "import torch\nfrom torch.utils.checkpoint import checkpoint\n\nSCALE = 1.0\n",
    "def block(x):\n    return torch.tanh(x * SCALE)\n",
    "def step(x):\n    global SCALE\n    out = checkpoint(block, x, use_reentrant=False)\n"
    "    SCALE = 2.0\n    out.sum().backward()\n",
)


@pytest.mark.parametrize("output_format", ["text", "json"])
def test_notebook_findings_name_their_cell(tmp_path, output_format):
    """A notebook's findings are reported as `ckptlint check` reports them: by cell (markdown
    cells counted, as Jupyter shows them) and row in it, not by rows of the joined cells."""
    import json

    from tests.notebooks import notebook_json

    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "train.ipynb").write_text(notebook_json(*NOTEBOOK_CELLS))
    proc = subprocess.run([PY, "-m", "ckptlint", "dynamic", "--format", output_format,
                           "train.ipynb", "--", PY, "-c", "pass"], cwd=tmp_path,
                          env=env_with_root(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    if output_format == "text":
        assert proc.stdout.startswith("train.ipynb:cell 3:2:27: CKP201 [unexercised] "), \
            proc.stdout
        assert "(checkpointed at train.ipynb:cell 4:3 via train.block)" in proc.stdout
        assert "rebound at train.ipynb:cell 4:4 in `step`" in proc.stdout, proc.stdout
        return
    [finding] = json.loads(proc.stdout)
    assert (finding["cell"], finding["location"]["row"]) == (3, 2), finding
    assert (finding["site"]["cell"], finding["site"]["row"]) == (4, 3), finding
    assert finding["verdict"] == "unexercised"
