"""`ckptlint profile` on tiny real transformers models and on toy blocks whose saved bytes
are known analytically: one row per checkpointed module, segments that save nothing, selective
checkpointing, the gradient check at replay time, the "checkpointing is not on" alarm, and
child-wrapped vs parent-wrapped boundaries. Real torch on CPU, real child processes."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.profile.helpers import PY, SCRIPTS, close_to, expected_bytes, profile

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers.utils import is_torch_available  # noqa: E402

KIB = 1024
# Feature detection: what a scenario needs that a torch release may lack (then its tests skip).
HAS_SAC = hasattr(pytest.importorskip("torch.utils.checkpoint"),
                  "create_selective_checkpoint_contexts")
HF_TORCH = is_torch_available()
MISSING = {
    "hf": None if HF_TORCH else "transformers' torch models need a newer torch than this one",
    "hf_eval": None if HF_TORCH else "transformers' torch models need a newer torch than this one",
}


def temporary_folder(prefix: str) -> str:
    """A folder for a scenario's side files, removed when the test process ends (the
    scenarios are built when this module is collected, even when none of them runs)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, True)
    return folder


_SAC_OUT = os.path.join(temporary_folder("ckptlint-sac-"), "expected.json")

SCENARIOS = {
    "hf": (("--format", "json", "hf_models.py"), (PY, "hf_models.py", "all"), None),
    "hf_eval": (("hf_models.py",), (PY, "hf_models.py", "llama", "eval"), None),
    "toys": (("--format", "json", "--grad-check", "toys.py"),
             (PY, "toys.py", "children", "nothing", *(("sac",) if HAS_SAC else ()), "state"),
             {"CKPT_TEST_OUT": _SAC_OUT}),
    "parent": (("--format", "json", "toys.py"), (PY, "toys.py", "parent", "wrapper"), None),
    "toys_text": (("toys.py",), (PY, "toys.py", "children", "nothing"), None),
    "budget": (("--format", "json", "--memory-budget", "600KiB", "--verify", "toys.py"),
               (PY, "toys.py", "mlp"), None),
    "budget_broken": (("--format", "json", "--memory-budget", "600KiB", "--verify", "toys.py"),
                      (PY, "toys.py", "mlp-once"),
                      {"CKPT_TEST_MARKER": os.path.join(temporary_folder("ckptlint-marker-"),
                                                        "ran")}),
}


class Runs(dict):
    """The started scenarios by name; reading one this torch cannot run skips the test."""

    def __getitem__(self, name):
        if MISSING.get(name):
            pytest.skip(MISSING[name])
        return super().__getitem__(name)


@pytest.fixture(scope="module")
def runs(selected_scenarios):
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield Runs({name: pool.submit(profile, *args, command=cmd, env=env)
                    for name, (args, cmd, env) in SCENARIOS.items()
                    if name in selected_scenarios and not MISSING.get(name)})


def _scripts():
    sys.path.insert(0, str(SCRIPTS))
    try:
        import hf_models
        import toys
    finally:
        sys.path.remove(str(SCRIPTS))
    return hf_models, toys


def layer_bytes(name: str) -> dict[str, tuple[str, int]]:
    """Per checkpointable layer of a plain (uncheckpointed) training-mode forward: its path,
    class and the bytes it saves for backward beyond its inputs and parameters."""
    hf_models, _ = _scripts()
    model = hf_models.build(name).train()
    out: dict[str, tuple[str, int]] = {}
    layers = {m: n for n, m in model.named_modules()
              if type(m).__name__ in ("LlamaDecoderLayer", "GPT2Block", "ViTLayer")}
    originals = {}
    for layer, path in layers.items():
        original = originals[path] = layer.forward

        def counted(*args, _original=original, _layer=layer, _path=path, **kwargs):
            result = []
            nbytes = expected_bytes(lambda *a, **k: result.append(_original(*a, **k)),
                                    list(args), [_layer], kwargs=kwargs)
            out[_path] = (type(_layer).__name__, nbytes)
            return result[0]

        layer.forward = counted
    # as under gradient checkpointing, where transformers turns the KV cache off
    model(**hf_models.batch(name), **({} if name == "vit" else {"use_cache": False}))
    return out


# --------------------------------------------------------------------------- transformers

@pytest.mark.slow
@pytest.mark.scenarios("hf")
def test_one_row_per_transformers_layer_with_its_path_class_and_bytes(runs):
    r = runs["hf"].result()
    assert r.rc == 0, r.stderr[-3000:]
    rows = {rec["module"]: rec for rec in r.records}
    for name in ("llama", "gpt2", "vit"):
        expected = layer_bytes(name)
        assert len(expected) == 2, expected
        for path, (cls, nbytes) in expected.items():
            record = rows[path]
            assert record["class"] == cls
            assert record["calls"] == 2
            assert close_to(record["activation_bytes_freed_per_call"], nbytes), (record, nbytes)
            assert record["input_bytes_kept_per_call"] > 0
    assert {rec["site"]["filename"] for rec in r.records} == {"hf_models.py"}
    assert len(r.records) == 6


@pytest.mark.slow
@pytest.mark.scenarios("hf_eval")
def test_eval_mode_model_raises_the_checkpointing_is_not_on_alarm_first(runs):
    r = runs["hf_eval"].result()
    assert r.rc == 0, r.stderr[-3000:]
    first = r.stdout.splitlines()[0]
    assert first.startswith("ckptlint profile: checkpointing is not on:"), r.stdout
    assert "LlamaDecoderLayer has gradient checkpointing on, but ran in eval() mode" in first
    assert "model.train()" in first
    assert "no checkpoint call ran" in r.stdout
    # what is left is still measured: activations saved with no checkpoint, by module
    assert "Saved for backward outside any checkpoint" in r.stdout
    assert "model.layers.0.mlp (LlamaMLP, in LlamaForCausalLM)" in r.stdout


@pytest.mark.scenarios("toys_text")
def test_no_alarm_when_checkpoints_ran(runs):
    r = runs["toys_text"].result()
    assert r.rc == 0, r.stderr[-3000:]
    assert "checkpointing is not on" not in r.stdout
    assert r.stdout.startswith("site ")


# --------------------------------------------------------------------------- toy blocks

@pytest.mark.scenarios("toys")
def test_segment_that_saves_nothing_is_dropped_with_that_reason(runs):
    r = runs["toys"].result()
    (record,) = r.rows("nothing", "toys.py")
    assert (record["recommendation"], record["code"]) == ("drop", "CKP502")
    assert record["activation_bytes_freed_per_call"] == 0
    assert "saved no tensor for backward" in record["reason"]
    assert "pure overhead" in record["reason"]
    assert record["module"] is None and record["class"] is None     # a plain function


@pytest.mark.scenarios("toys")
def test_selective_policy_counts_what_it_keeps(runs):
    if not HAS_SAC:
        pytest.skip("needs torch.utils.checkpoint.create_selective_checkpoint_contexts, "
                    "which is missing here")
    r = runs["toys"].result()
    _, toys = _scripts()
    (record,) = r.rows("sac", "toys.py")
    with open(_SAC_OUT) as handle:
        counted = json.load(handle)           # the same run, counted by saved_tensors_hooks
    n, d, h, f = toys.N, toys.D, toys.H, toys.FLOAT
    assert counted["plain_saved"] == 2 * n * h * f          # gelu input + second mm input
    assert counted["policy_kept"] == (n * h + n * d) * f     # both mm outputs
    assert close_to(record["policy_bytes_kept_per_call"], counted["policy_kept"])
    freed = counted["plain_saved"] - counted["policy_kept"]
    assert close_to(record["activation_bytes_freed_per_call"], freed), (record, counted)
    assert record["input_bytes_kept_per_call"] == n * d * f


@pytest.mark.scenarios("toys")
def test_state_changed_before_backward_is_fix_in_both_modes_and_exits_1(runs):
    r = runs["toys"].result()
    assert r.rc == 1, r.stderr[-3000:]
    reentrant = r.site("state reentrant", "toys.py")
    plain = r.site("state non-reentrant", "toys.py")
    for record in (reentrant, plain):
        assert (record["recommendation"], record["code"]) == ("fix", "CKP501"), record
        assert record["grad_max_abs_diff"] > 1e-3, record
    # a reentrant forward saves nothing to compare: only the gradient check sees it
    assert "differ from a plain run" in reentrant["reason"]
    # the clean segments agree exactly under the same check
    for child in r.rows("children", "toys.py"):
        if child["grad_max_abs_diff"] is not None:
            assert child["grad_max_abs_diff"] <= 1e-6 and child["recommendation"] == "drop"


@pytest.mark.scenarios("toys", "parent")
def test_child_and_parent_boundaries_match_the_analytic_bytes(runs):
    _, toys = _scripts()
    activation = toys.N * toys.D * toys.FLOAT            # one [N, D] float32 tensor
    children = runs["toys"].result()
    rows = children.rows("children", "toys.py")
    assert sorted(r["module"] for r in rows) == sorted(
        f"parents.{p}.c{c}" for p in range(4) for c in (1, 2, 3))
    for record in rows:
        assert record["class"] == "Child"
        assert record["activation_bytes_freed_per_call"] == 2 * activation
        assert record["input_bytes_kept_per_call"] == activation
    parent = runs["parent"].result()
    assert parent.rc == 0, parent.stderr[-3000:]
    prow = parent.rows("parent", "toys.py")
    assert sorted(r["module"] for r in prow) == [f"parents.{p}" for p in range(4)]
    for record in prow:
        assert record["class"] == "Parent"
        # 3 children x 2 saves, plus the inputs of c2 and c3 (outputs inside the segment)
        assert record["activation_bytes_freed_per_call"] == 8 * activation
        assert record["input_bytes_kept_per_call"] == activation
    # the child-wrapped run predicts what the parent-wrapped run measures
    advice = [line for line in children.stderr.splitlines()
              if "Checkpoint the parent instead: parents.0 (Parent)" in line]
    assert advice, children.stderr[-3000:]
    assert "keep 192.0 KiB of inputs per call" in advice[0]
    assert "would keep only its inputs (64.0 KiB): 128.0 KiB less" in advice[0]
    assert "x 4 Parent modules" in advice[0]
    assert "its one replay holds 256.0 KiB more at once" in advice[0]
    assert advice[0].endswith("; the same holds for parents.1, parents.2, parents.3")
    assert len(advice) == 1
    kept_children = sum(r["input_bytes_kept_per_call"] for r in rows if r["module"].startswith("parents.0."))
    kept_parent = next(r for r in prow if r["module"] == "parents.0")["input_bytes_kept_per_call"]
    assert kept_children - kept_parent == 128 * KIB


# --------------------------------------------------------------------------- policies

@pytest.mark.scenarios("budget")
def test_suggested_policy_meets_its_budget_in_the_verifying_run(runs):
    r = runs["budget"].result()
    if not HAS_SAC:     # nothing to apply the policy with: said, and the run is not a pass
        assert r.rc == 2, r.stderr[-3000:]
        (record,) = r.rows("mlp", "toys.py")
        assert record["suggested_policy"]["verified"]["text"] == (
            "not verified: this torch has no selective activation checkpointing "
            "(torch.utils.checkpoint.create_selective_checkpoint_contexts) to apply the "
            "policies with")
        return
    assert r.rc == 0, r.stderr[-3000:]
    (record,) = r.rows("mlp", "toys.py")
    policy = record["suggested_policy"]
    budget = 600 * KIB
    assert policy["budget"] == budget
    assert 0 < policy["predicted_bytes_kept_per_call"] <= budget
    # dropout draws random numbers: never saved, whatever the budget
    assert any("bernoulli" in name or "dropout" in name for name in policy["never_saved"])
    assert not any("bernoulli" in name or "dropout" in name for name in policy["save"])
    verified = policy["verified"]
    assert verified["within_budget"] is True
    assert verified["bytes_kept_per_call"] <= budget
    assert close_to(verified["bytes_kept_per_call"], policy["predicted_bytes_kept_per_call"])
    assert verified["grad_max_abs_diff"] is not None and verified["grad_max_abs_diff"] <= 1e-6
    # the policy is printed ready to paste
    assert "SAVE = {torch.ops." in r.stderr and "create_selective_checkpoint_contexts" in r.stderr
    assert "gradients agree with a plain run" in r.stderr


@pytest.mark.scenarios("budget_broken")
def test_a_verifying_run_that_fails_says_so_next_to_each_policy(runs):
    if not HAS_SAC:
        pytest.skip("needs torch.utils.checkpoint.create_selective_checkpoint_contexts, "
                    "which is missing here (no verifying run is started without it)")
    r = runs["budget_broken"].result()
    assert r.rc == 2, r.stderr[-3000:]     # the verification asked for could not be done
    (record,) = r.rows("mlp", "toys.py")
    verified = record["suggested_policy"]["verified"]
    assert verified["grad_max_abs_diff"] is None and verified["within_budget"] is None
    assert verified["text"] == ("not verified: the verifying run failed: "
                                "the command exited with status 1"), verified
    assert "--verify: the verifying run failed" in r.stderr
    assert "refusing a second run" in r.stderr


@pytest.mark.scenarios("parent")
def test_checkpoint_wrapper_rows_carry_the_wrapped_module_path(runs):
    _, toys = _scripts()
    r = runs["parent"].result()
    rows = r.rows("wrapper", "toys.py")
    assert sorted(rec["module"] for rec in rows) == [f"parents.{p}" for p in range(4)], r.records
    for record in rows:
        assert record["class"] == "Parent"
        assert record["activation_bytes_freed_per_call"] == 8 * toys.N * toys.D * toys.FLOAT
