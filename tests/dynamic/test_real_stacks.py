"""Dynamic mode on the stacks real training code uses: selective checkpointing, FSDP2, DDP and
FSDP2 under torchrun, transformers models, torch.compile; per-finding evidence; a run that is
never silent. Real torch, real child processes; ground truth from gradients in each script."""

from __future__ import annotations

import re

import pytest

from dynhelp import PY, SCRIPTS, run_dynamic, torch_has

pytest.importorskip("torch")


def differs(values) -> bool:
    return values["plain"] != values["ckpt"]


def _row(script, needle):
    for row, line in enumerate((SCRIPTS / script).read_text().splitlines(), 1):
        if needle in line:
            return row
    raise AssertionError(needle)


def _at(result, code, script, needle):
    """The `code` finding on the line of `script` that holds `needle`."""
    row = _row(script, needle)
    [found] = [f for f in result.by_code(code) if f["location"]["row"] == row]
    return found


def _by_target(result, code="CKP201"):
    return {f["target"]["qualname"]: f for f in result.by_code(code)}


def _sound_run_is_cleared(r, matched: str):
    """A sound run (same gradients as the plain one): its CKP201 cleared, no CKP501."""
    assert not differs(r.values), "ground truth: the checkpointed run is sound"
    assert not r.by_code("CKP501"), r.findings
    f = r.one("CKP201")
    assert f["verdict"] == "cleared", f
    assert f"replay matched the forward {matched}" in f["evidence"]
    assert r.rc == 0
    return f


def _scale_change_is_confirmed(r, changed_to: str):
    """A harmful run (SCALE changed before backward): its CKP201 confirmed by that change."""
    assert differs(r.values), "ground truth: SCALE changed, the recomputed part differs"
    f = r.one("CKP201")
    assert f["verdict"] == "confirmed", f
    assert f"`SCALE` changed between forward and backward (1.0 → {changed_to})" in f["evidence"]
    return f


def _summary(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("ckptlint: ")]
    return "\n".join(lines)


# --------------------------------------------------------------------------- selective checkpointing

@pytest.mark.slow
@pytest.mark.scenarios("selective_harmless")
def test_selective_checkpointing_compares_only_what_the_replay_recomputes(runs):
    _sound_run_is_cleared(runs["selective_harmless"], "once")


@pytest.mark.slow
@pytest.mark.scenarios("selective_harmful")
def test_selective_checkpointing_still_catches_a_real_divergence(runs):
    r = runs["selective_harmful"]
    f = _scale_change_is_confirmed(r, "2.0")
    assert "Block.forward()" in f["evidence"]
    assert not r.by_code("CKP501")


# --------------------------------------------------------------------------- FSDP2, one process

@pytest.mark.slow
@pytest.mark.scenarios("fsdp_single_harmless")
def test_fsdp2_hooks_are_not_the_segments_computation(runs):
    f = _sound_run_is_cleared(runs["fsdp_single_harmless"], "2 times")
    assert "at fsdp_single.py:" in f["evidence"] and "(blocks.0, blocks.1)" in f["evidence"]


@pytest.mark.slow
@pytest.mark.scenarios("fsdp_single_harmful")
def test_fsdp2_real_divergence_is_confirmed(runs):
    f = _scale_change_is_confirmed(runs["fsdp_single_harmful"], "3.0")
    assert "_record_function" not in f["evidence"]


# --------------------------------------------------------------------------- one divergence, several findings

@pytest.mark.slow
@pytest.mark.scenarios("two_findings")
def test_only_the_finding_the_evidence_is_about_is_confirmed(runs):
    r = runs["two_findings"]
    assert r.values["plain"] != r.values["ckpt"], "ground truth: site A's gradients are wrong"
    assert isinstance(r.values["ckpt_b"], str) and "strict mode" in r.values["ckpt_b"], \
        "ground truth: site B's replay raised"
    assert isinstance(r.values["plain_b"], list)
    state = _at(r, "CKP201", "two_findings.py", "x * SCALE")
    assert state["verdict"] == "confirmed", state
    assert "`SCALE` changed between forward and backward (1.0 → 3.0)" in state["evidence"]
    pid = _at(r, "CKP202", "two_findings.py", "os.getpid()")
    assert pid["verdict"] == "cleared", pid
    assert f"the first difference came from two_findings.py:{_row('two_findings.py', 'x * SCALE')}" \
        in pid["evidence"]
    branch = _at(r, "CKP203", "two_findings.py", "h.sum() > -100.0")
    assert branch["verdict"] == "cleared", branch
    assert "diverged before line" in branch["evidence"] or "the same way" in branch["evidence"]
    flag = _at(r, "CKP204", "two_findings.py", "if STRICT:")
    assert flag["verdict"] == "confirmed", flag
    assert "raised RuntimeError: strict mode refuses the replay" in flag["evidence"]
    raise_row = _row("two_findings.py", "raise RuntimeError")
    assert f"the `if` at line {raise_row - 1} went to line {raise_row + 1} (past it) in the " \
           f"forward and to line {raise_row} (its body) in the replay" in flag["evidence"]
    gain = _at(r, "CKP201", "two_findings.py", "x * GAIN")
    assert gain["verdict"] == "cleared", gain
    assert f"it diverged before line {raise_row + 1} (at two_findings.py:{raise_row})" \
        in gain["evidence"]
    assert not r.by_code("CKP501"), r.by_code("CKP501")
    assert r.rc == 1


# --------------------------------------------------------------------------- torch.compile

@pytest.mark.slow
@pytest.mark.scenarios("compiled")
def test_compiled_site_is_not_watched_and_an_eager_site_that_never_ran_is_unexercised(runs):
    r = runs["compiled"]
    assert r.values["grad"] == r.values["plain"], "the compiled program still ran, soundly"
    by_target = _by_target(r)
    compiled, eager = by_target["block"], by_target["eager_block"]
    assert compiled["verdict"] == "error", compiled
    assert "torch.compile" in compiled["evidence"]
    assert eager["verdict"] == "unexercised", eager
    assert f"compiled.py:{_row('compiled.py', 'ckpt-site: E')} was never called" in eager["evidence"]
    assert "not watched: 1 checkpoint call compiled by torch.compile" in _summary(r)


# --------------------------------------------------------------------------- transformers

@pytest.mark.slow
@pytest.mark.scenarios("hf_enable")
def test_two_enable_calls_are_joined_by_the_call_that_ran(runs):
    r = runs["hf_enable"]
    assert r.values["plain"] == r.values["ckpt"], "ground truth: the gradients are right"
    ran = _at(r, "CKP104", "hf_enable.py", "ckpt-site: R")
    assert ran["verdict"] == "confirmed", ran
    assert re.search(r"LlamaDecoderLayer\.forward\(\) \(model\.layers\.[01]\) at hf_enable\.py:\d+ "
                     r"ran in reentrant mode", ran["evidence"]), ran["evidence"]
    assert "wrapper" not in ran["evidence"]
    never = _at(r, "CKP104", "hf_enable.py", "ckpt-site: N")
    assert never["verdict"] == "unexercised", never
    assert f"the enable call at hf_enable.py:{_row('hf_enable.py', 'ckpt-site: N')} never ran" \
        in never["evidence"]
    assert f"enable calls that ran: hf_enable.py:{_row('hf_enable.py', 'ckpt-site: R')}" \
        in never["evidence"]


# --------------------------------------------------------------------------- torchrun

def _torchrun(mode: str):
    if not torch_has("torch.distributed", "is_available"):
        pytest.skip("this torch has no torch.distributed")
    if mode == "fsdp" and not torch_has("torch.distributed.fsdp", "fully_shard"):
        pytest.skip("this torch has no public torch.distributed.fsdp.fully_shard")
    result = run_dynamic("dist_train.py", (mode,), timeout=400,
                         launcher=("-m", "torch.distributed.run", "--standalone",
                                   "--nproc_per_node", "2"))
    if result.values is None and "Address" in result.stderr:
        pytest.skip(f"two processes could not start here: {result.stderr[-500:]}")
    return result


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_torchrun_two_ranks_names_the_rank_that_diverged(mode):
    r = _torchrun(mode)
    ranks = {item["rank"]: item["differs"] for item in r.values["ranks"]}
    assert ranks == {0: False, 1: True}, "ground truth: only rank 1's replay reads a changed SCALE"
    by_target = _by_target(r)
    harmful, clean = by_target["BlockA.forward"], by_target["BlockB.forward"]
    assert harmful["verdict"] == "confirmed", harmful
    module = "module.a" if mode == "ddp" else "a"      # DDP wraps the model as `module`
    assert f"BlockA.forward() ({module}) at dist_train.py:" in harmful["evidence"], harmful
    assert "on rank 1 of 2" in harmful["evidence"]
    assert "`SCALE` changed between forward and backward (1.0 → 3.0)" in harmful["evidence"]
    assert clean["verdict"] == "cleared", clean
    assert not r.by_code("CKP501"), r.by_code("CKP501")
    assert "in 2 processes (ranks 0, 1 of 2)" in _summary(r), _summary(r)
    assert r.rc == 1


# --------------------------------------------------------------------------- never silent

@pytest.mark.slow
@pytest.mark.scenarios("state_read_harmful")
def test_summary_after_a_watched_run(runs):
    r = runs["state_read_harmful"]
    assert "ckptlint: watched 1 checkpoint site in 1 process: 2 calls, 2 replays, 2 diverged" \
        in _summary(r), r.stderr[-2000:]


@pytest.mark.parametrize("how", ["isolated", "pythonpath"])
def test_a_run_the_watcher_never_attached_to_is_an_error(how):
    """`python -I` ignores PYTHONPATH; `env PYTHONPATH=...` replaces ckptlint's: either way no
    process loads the watcher, and a CI job must not pass because nothing was watched."""
    if how == "isolated":
        r = run_dynamic("isolated.py", command=(PY, "-I", "isolated.py"))
    else:
        r = run_dynamic("isolated.py", command=("env", "PYTHONPATH=", PY, "isolated.py"))
    assert r.values is not None, "the script itself ran"
    f = r.one("CKP201")
    assert f["verdict"] == "error", f
    assert "the watcher never attached" in f["evidence"] and "python -I" in f["evidence"]
    assert "ckptlint: the watcher never attached" in _summary(r)
    assert r.rc == 2


@pytest.mark.slow
def test_attached_but_no_checkpoint_ran_says_so(tmp_path):
    script = tmp_path / "no_ckpt.py"
    script.write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    r = run_dynamic("state_read.py", command=(PY, str(script)))
    assert r.one("CKP201")["verdict"] == "unexercised"
    assert "no checkpoint call ran" in _summary(r), r.stderr
    assert r.rc == 0


# --------------------------------------------------------------------------- beyond static findings

CONFIG = '[tool.ckptlint]\nselect = ["CKP501"]\n'


def _beyond(tmp_path, config: str | None):
    """beyond.py watched with the findings ckptlint's own static pass gives it."""
    options = ()
    if config is not None:
        (tmp_path / "pyproject.toml").write_text(config)
        options = ("--config", str(tmp_path / "pyproject.toml"))
    return run_dynamic("beyond.py", options=options, lint=True)


@pytest.mark.slow
def test_doubled_side_effects_and_draws_without_a_static_finding_are_ckp501(tmp_path):
    r = _beyond(tmp_path, CONFIG)
    values = r.values
    assert values["plain"]["count"] == 1 and values["ckpt"]["count"] == 2, values
    assert values["plain"]["next_draw"] != values["ckpt"]["next_draw"], values
    [ckp501] = r.findings
    assert ckp501["code"] == "CKP501" and ckp501["verdict"] == "confirmed", r.findings
    assert "drew from Python's `random` again" in ckp501["evidence"]
    assert "changed `COUNT` again (1 → 2)" in ckp501["evidence"], ckp501["evidence"]
    assert r.rc == 1


@pytest.mark.slow
def test_static_findings_explain_what_they_name(tmp_path):
    found = _beyond(tmp_path, None).findings
    by_code = {f["code"]: f for f in found}
    assert by_code["CKP303"]["verdict"] == "confirmed", found
    assert "drew from Python's `random` again" in by_code["CKP303"]["evidence"]
    assert by_code["CKP401"]["verdict"] == "confirmed", found
    assert "CKP501" not in by_code, found
