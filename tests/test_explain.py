"""`ckptlint explain [LOG]`: checkpoint errors in logs, classified by signature.

The logs under tests/explain_logs/real/ are what the programs in tests/explain_logs/programs/
printed when run under torch 2.13 on CPU (tests/explain_logs/generate.py writes them; the slow
test below runs the programs again); those under handwritten/ are excerpts in torch's format
for setups that cannot run here (ZeRO-3, FSDP on CUDA), marked as handwritten in their first
line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ckptlint.explain.signatures import SIGNATURES
from tests.cli_helpers import REPO, ckptlint_command, run_cli, run_cli_process
from tests.privileges import give_to_nobody, run_cli_as_nobody, shared_tmp_fixture  # noqa: F401

LOGS = REPO / "tests" / "explain_logs"
REAL = LOGS / "real"

# log -> (exit status, the signature of each distinct error found, in order)
REAL_EXPECTED = {
    "branch_flipped": (0, [["tensor-count-changed"]]),
    "branch_more": (0, [["tensor-count-changed"]]),
    "cache_twice": (0, [["doubled-dimension"]]),
    "clean_training": (0, []),
    "ddp_find_unused": (0, [["ddp-variable-ready-twice"]]),
    "debug_dump": (0, [["precision-cast-not-replayed"]]),
    "dtype_cast": (0, [["precision-cast-not-replayed"]]),
    "frozen_inputs": (0, [["reentrant-frozen-inputs"]]),
    "kernel_context_left": (0, [["other-kernels-replayed"]]),
    "reentrant_autograd_grad": (0, [["reentrant-autograd-grad"]]),
    "reentrant_context_fn": (0, [["reentrant-context-fn"]]),
    "reentrant_kwargs": (0, [["reentrant-keyword-arguments"]]),
    "reshaped": (1, [[]]),
    "routing_changed": (0, [["token-count-changed"]]),
}
HANDWRITTEN_EXPECTED = {
    "zero3_peft": (0, [["partitioned-parameter"], ["partitioned-parameter"]]),
    "fsdp_mixed_precision": (0, [["precision-cast-not-replayed"]]),
    "kv_cache_appended_twice": (0, [["doubled-dimension"]]),
    "moe_routing": (0, [["token-count-changed"]]),
    "unpacked_twice": (0, [["unpacked-twice"]]),
    "unknown_checkpoint_error": (1, [[]]),
}

METADATA_ERROR = ("torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed "
                  "values for the following tensors have different metadata than during the "
                  "forward pass.\n")


def metadata_line(shape: str, dtype: str = "float32", device: str = "device(type='cpu')") -> str:
    return f"{{'shape': torch.Size([{shape}]), 'dtype': torch.{dtype}, 'device': {device}}}"


def metadata_log(saved: str, recomputed: str, position: int = 0) -> str:
    return (METADATA_ERROR + f"tensor at position {position}:\nsaved metadata: {saved}\n"
            f"recomputed metadata: {recomputed}\n.\n")


def explain_json(*args: str, input: bytes | None = None):
    result = run_cli("explain", "--format", "json", *args, cwd=REPO, input=input)
    return result.returncode, json.loads(result.stdout) if result.stdout else None, result


def signature_ids(errors: list[dict]) -> list[list[str]]:
    return [[signature["id"] for signature in error["signatures"]] for error in errors]


@pytest.mark.parametrize("name", sorted(REAL_EXPECTED))
def test_real_logs(name: str) -> None:
    status, errors, _ = explain_json(str(REAL / f"{name}.log"))
    assert (status, signature_ids(errors)) == REAL_EXPECTED[name]


@pytest.mark.parametrize("name", sorted(HANDWRITTEN_EXPECTED))
def test_handwritten_logs(name: str) -> None:
    path = LOGS / "handwritten" / f"{name}.log"
    assert path.read_text().startswith("# HANDWRITTEN")
    status, errors, _ = explain_json(str(path))
    assert (status, signature_ids(errors)) == HANDWRITTEN_EXPECTED[name]


def test_every_program_has_its_log_and_expectation() -> None:
    programs = {path.stem for path in (LOGS / "programs").glob("*.py")}
    assert programs == {path.stem for path in REAL.glob("*.log")} == set(REAL_EXPECTED)


def test_every_signature_is_seen_in_a_log() -> None:
    seen = {signature for expected in (REAL_EXPECTED, HANDWRITTEN_EXPECTED)
            for _, errors in expected.values() for ids in errors for signature in ids}
    assert seen == {signature.id for signature in SIGNATURES}


@pytest.mark.slow
def test_programs_run_again_are_explained_the_same() -> None:
    """Fresh output of every program (torch 2.13, CPU; DDP with two gloo ranks)."""
    from tests.explain_logs.generate import PROGRAMS, run_program

    for name, expected in REAL_EXPECTED.items():
        output = run_program(PROGRAMS / f"{name}.py")
        status, errors, _ = explain_json("-", input=output)
        assert (status, signature_ids(errors)) == expected, name


def test_metadata_compared_field_by_field() -> None:
    status, [error], _ = explain_json(str(REAL / "cache_twice.log"))
    assert status == 0 and error["kind"] == "metadata-mismatch" and error["line"] == 17
    assert error["tensor_count"] == 2 and error["classified"] is True
    assert error["tensors"][0] == {
        "position": 0, "differs": ["shape"], "signature": "doubled-dimension",
        "saved": {"shape": [4, 6], "dtype": "float32", "device": "cpu"},
        "recomputed": {"shape": [4, 12], "dtype": "float32", "device": "cpu"}}
    [signature] = error["signatures"]
    assert signature["rules"] == ["CKP402", "CKP401"] and signature["fix"] and signature["cause"]
    assert set(error) == {"line", "occurrences", "kind", "message", "tensors", "tensor_count",
                          "tensors_saved", "classified", "signatures"}


def test_saved_tensor_counts_are_read() -> None:
    _, [error], _ = explain_json(str(REAL / "branch_flipped.log"))
    assert error["tensors_saved"] == {"forward": 5, "recomputation": 1}


@pytest.mark.parametrize(("saved", "recomputed", "expected"), [
    (metadata_line("4096, 4096"), metadata_line("0"), "partitioned-parameter"),
    (metadata_line("0"), metadata_line("512"), "partitioned-parameter"),
    (metadata_line("3, 0"), metadata_line("0"), None),  # an empty tensor is no shard
    (metadata_line("2, 171, 64"), metadata_line("2, 342, 64"), "doubled-dimension"),
    (metadata_line("2, 342, 64"), metadata_line("2, 171, 64"), None),  # halved: not known
    (metadata_line("1, 8"), metadata_line("2, 8"), None),  # doubled or one more: ambiguous
    (metadata_line("4, 6"), metadata_line("4, 12", "bfloat16"), None),  # two fields at once
    (metadata_line("99, 5120"), metadata_line("98, 5120"), "token-count-changed"),
    (metadata_line("99, 5120"), metadata_line("98, 5121"), None),  # two dimensions
    (metadata_line("8, 8, 16"), metadata_line("2, 4, 8, 16"), "other-kernels-replayed"),
    (metadata_line("8", "bfloat16"), metadata_line("8"), "precision-cast-not-replayed"),
    (metadata_line("8", "float16"), metadata_line("8"), "precision-cast-not-replayed"),
    (metadata_line("8", "float64"), metadata_line("8"), None),  # not a reduced precision
    (metadata_line("8"), metadata_line("8", device="device(type='cuda', index=0)"), None),
])
def test_tensor_signatures(saved: str, recomputed: str, expected: str | None) -> None:
    status, [error], _ = explain_json("-", input=metadata_log(saved, recomputed).encode())
    assert error["tensors"][0]["signature"] == expected
    assert status == (0 if expected else 1)


def test_stdin_without_argument_and_dash() -> None:
    log = (REAL / "routing_changed.log").read_bytes()
    for args in ((), ("-",)):
        result = run_cli("explain", *args, cwd=REPO, input=log)
        assert result.returncode == 0
        assert result.stdout.startswith("<stdin>:17: CheckpointError: Recomputed values")
        assert "token-count-changed" in result.stdout and "CKP205" in result.stdout


def test_text_output_names_cause_rule_and_fix() -> None:
    result = run_cli("explain", str(REAL / "branch_flipped.log"), cwd=REPO)
    assert result.returncode == 0
    assert "tensors saved: 5 in the forward, 1 in the replay" in result.stdout
    assert ("rules: CKP204 state-dependent-branch (`ckptlint rule CKP204`), "
            "CKP203 data-dependent-branch (`ckptlint rule CKP203`)") in result.stdout
    assert "likely cause:" in result.stdout and "    fix: " in result.stdout
    assert result.stdout.endswith("1 distinct checkpoint error (1 seen): 1 explained, "
                                  "0 unknown\n")


def test_no_checkpoint_error_exit_0() -> None:
    result = run_cli("explain", str(REAL / "clean_training.log"), cwd=REPO)
    assert (result.returncode, result.stdout) == (
        0, f"no checkpoint error found in {REAL / 'clean_training.log'}\n")
    assert explain_json(str(REAL / "clean_training.log"))[:2] == (0, [])


def test_unknown_error_exit_1_and_says_so() -> None:
    result = run_cli("explain", str(REAL / "reshaped.log"), cwd=REPO)
    assert result.returncode == 1
    assert "saved [4, 4] float32 cpu, recomputed [2, 8] float32 cpu" in result.stdout
    assert "unknown: no known signature matches this error" in result.stdout


def test_one_unknown_among_known_errors_exit_1() -> None:
    log = (REAL / "dtype_cast.log").read_bytes() + (REAL / "reshaped.log").read_bytes()
    status, errors, _ = explain_json("-", input=log)
    assert status == 1 and [error["classified"] for error in errors] == [True, False]


def test_repeated_error_counted_once() -> None:
    log = (REAL / "dtype_cast.log").read_bytes() * 3
    status, [error], _ = explain_json("-", input=log)
    assert status == 0 and error["occurrences"] == 3


def test_traceback_source_lines_are_not_errors() -> None:
    log = b"    raise CheckpointError(\n    except CheckpointError as error:\n"
    assert explain_json("-", input=log)[:2] == (0, [])


def test_non_utf8_bytes_do_not_stop_it() -> None:
    log = (b"\xff\xfe caf\xe9 \x00\x81 garbage\n" + METADATA_ERROR.encode()
           + b"tensor at position 0:\xff\n"  # the one unreadable line ends the tensor list
           + b"\xc3\x28 saved metadata: nonsense\n")
    status, [error], _ = explain_json("-", input=log)
    assert status == 1 and error["kind"] == "metadata-mismatch" and error["tensor_count"] == 0
    text = run_cli("explain", cwd=REPO, input=log).stdout
    assert "no tensor lines followed the message" in text


def test_carriage_returns_split_progress_bars() -> None:
    log = b"  1%|  | 1/100\r  2%|  | 2/100\r" + (REAL / "dtype_cast.log").read_bytes()
    assert explain_json("-", input=log)[:2][0] == 0


def test_missing_file_and_folder_exit_2(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.log", tmp_path):
        result = run_cli("explain", str(path), cwd=tmp_path)
        assert result.returncode == 2 and result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith(f"ckptlint: error: cannot read {path}: ")


def test_unreadable_file_exit_2(shared_tmp: Path) -> None:
    log = shared_tmp / "train.log"
    log.write_bytes((REAL / "dtype_cast.log").read_bytes())
    os.chmod(log, 0o600)  # root's, unreadable for uid 65534
    result = run_cli_as_nobody("explain", str(log), cwd=shared_tmp)
    assert result.returncode == 2
    assert result.stderr == f"ckptlint: error: cannot read {log}: Permission denied\n"
    give_to_nobody(log)
    assert run_cli_as_nobody("explain", str(log), cwd=shared_tmp).returncode == 0


def test_list_prints_the_table() -> None:
    text = run_cli("explain", "--list", cwd=REPO)
    assert text.returncode == 0
    for signature in SIGNATURES:
        assert f"{signature.id}\n  shows: {signature.shows}\n" in text.stdout
    listed = json.loads(run_cli("explain", "--list", "--format", "json", cwd=REPO).stdout)
    assert [entry["id"] for entry in listed] == [signature.id for signature in SIGNATURES]
    assert all(set(entry) == {"id", "shows", "cause", "rules", "fix", "reference"}
               for entry in listed)


def test_help_states_the_exit_status() -> None:
    result = run_cli("explain", "--help", cwd=REPO)
    assert result.returncode == 0
    assert "Exit status: 0 every checkpoint error found is explained" in result.stdout
    assert "--list" in result.stdout and "--format [text|json]" in result.stdout


def test_explain_never_imports_torch(tmp_path: Path) -> None:
    probe = ("import sys, runpy\n"
             "sys.argv = ['ckptlint', 'explain', sys.argv[1]]\n"
             "try:\n    runpy.run_module('ckptlint', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('torch' in sys.modules, file=sys.stderr)\n")
    import sys

    result = subprocess.run([sys.executable, "-c", probe, str(REAL / "cache_twice.log")],
                            cwd=tmp_path, capture_output=True, text=True)
    assert "doubled-dimension" in result.stdout
    assert result.stderr.strip().endswith("False")


PEAK_OF_CHILD = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[1:])
sys.stderr.write(f"peak_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
sys.exit(code)
"""


@pytest.mark.slow
def test_huge_log_streams_in_bounded_memory(tmp_path: Path) -> None:
    """300 MB through a pipe, the error at the end: the process stays far below that."""
    filler = b"step 123 | loss 2.3117 | lr 2.0e-05 | tokens/s 51234 | " + b"x" * 40 + b"\n"
    chunk = filler * 10_000
    error = (REAL / "cache_twice.log").read_bytes()
    # A child's peak RSS counts its parent's at fork (Linux keeps the old high-water mark at
    # exec), so a small wrapper process starts ckptlint and reports the peak of its child.
    command = [sys.executable, "-c", PEAK_OF_CHILD, *ckptlint_command(), "explain"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path)

    def write() -> None:
        assert process.stdin is not None
        for _ in range(300 * 1024 * 1024 // len(chunk)):
            process.stdin.write(chunk)
        process.stdin.write(b"a line without end " * 20_000)  # 400 kB, no newline
        process.stdin.write(b"\n" + error)
        process.stdin.close()

    writer = threading.Thread(target=write)
    writer.start()
    assert process.stdout is not None
    output = process.stdout.read()
    writer.join()
    assert process.stderr is not None
    peak_kib = int(process.stderr.read().decode().split("peak_kib=")[1])
    assert process.wait() == 0
    assert b"doubled-dimension" in output
    assert peak_kib < 120 * 1024  # under 120 MB for a 300 MB log


def test_console_script_exit_codes() -> None:
    assert run_cli_process("explain", str(REAL / "reshaped.log"), cwd=REPO).returncode == 1
    assert run_cli_process("explain", str(REAL / "cache_twice.log"), cwd=REPO).returncode == 0


def test_readme_lists_every_signature() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Explain: what a CheckpointError means")[1].split("\n## ")[0]
    rows = [line.split("|")[1].strip().strip("`") for line in section.splitlines()
            if line.startswith("| `")]
    assert rows[:len(SIGNATURES)] == [signature.id for signature in SIGNATURES]
    for signature in SIGNATURES:
        row = next(line for line in section.splitlines() if line.startswith(f"| `{signature.id}`"))
        assert row.rstrip().endswith(f"| {', '.join(signature.rules) or '—'} |")


def test_logger_prefix_on_the_first_line_only() -> None:
    log = ("2025-06-03 14:02:11,532 ERROR trainer: " + METADATA_ERROR
           + "tensor at position 3:\n"
           + f"saved metadata: {metadata_line('4096, 4096')}\n"
           + f"recomputed metadata: {metadata_line('0')}\n.\n"
           + "2025-06-03 14:02:12,001 INFO trainer: shutting down\n")
    status, [error], _ = explain_json("-", input=log.encode())
    assert (status, error["tensor_count"], error["line"]) == (0, 1, 1)
    assert error["tensors"][0]["signature"] == "partitioned-parameter"


def test_two_errors_in_a_row_keep_their_own_tensors() -> None:
    first = metadata_log(metadata_line("8", "bfloat16"), metadata_line("8"))
    second = metadata_log(metadata_line("4, 4"), metadata_line("2, 8"), position=5)
    status, errors, _ = explain_json("-", input=(first + second).encode())
    assert status == 1
    assert [(error["line"], [t["position"] for t in error["tensors"]]) for error in errors] == [
        (1, [0]), (6, [5])]


STATE_BRANCH_PROJECT = '''\
import torch
from torch.utils.checkpoint import checkpoint

use_gate = True


def block(x):
    h = torch.sin(x)
    if use_gate:
        h = torch.sigmoid(h)
    return h


def step(x):
    global use_gate
    out = checkpoint(block, x, use_reentrant=False)
    use_gate = not use_gate
    out.sum().backward()
'''


def test_sites_lists_the_findings_of_the_named_rule(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(STATE_BRANCH_PROJECT)
    log = str(REAL / "branch_flipped.log")
    result = run_cli("explain", "--sites", ".", log, cwd=tmp_path)
    assert result.returncode == 0
    assert ("    site: model.py:9:8: CKP204 checkpointed code branches on `use_gate`"
            in result.stdout)
    status, [error], _ = explain_json("--sites", str(tmp_path), log)
    [site] = error["signatures"][0]["sites"]
    assert (site["code"], site["row"], status) == ("CKP204", 9, 0)
    # A clean project: the rule was run and found nothing.
    (tmp_path / "model.py").write_text("x = 1\n")
    result = run_cli("explain", "--sites", ".", log, cwd=tmp_path)
    assert "    sites: no CKP204 or CKP203 finding in the linted code" in result.stdout
    # Without --sites, no site is looked for.
    assert "sites" not in explain_json(log)[1][0]["signatures"][0]


def test_sites_in_a_notebook_name_their_cell(tmp_path: Path) -> None:
    """A notebook's sites read `cell N:row:col` with rows counting in the cell, as the
    findings of `ckptlint check` do, not rows of the cells' joined text."""
    from tests.notebooks import notebook_json

    head, body = STATE_BRANCH_PROJECT.split("\n\n\ndef block", 1)
    (tmp_path / "train.ipynb").write_text(notebook_json(head, "def block" + body))
    log = str(REAL / "branch_flipped.log")
    result = run_cli("explain", "--sites", ".", log, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    checked = run_cli("--select", "CKP204", "train.ipynb", cwd=tmp_path).stdout
    place = checked.split(": CKP204")[0]
    assert place.startswith("train.ipynb:cell 3:"), checked
    assert f"    site: {place}: CKP204 checkpointed code branches on `use_gate`" \
        in result.stdout, result.stdout
    _, [error], _ = explain_json("--sites", str(tmp_path), log)
    [site] = error["signatures"][0]["sites"]
    row = int(place.split(":")[2])
    assert (site["cell"], site["row"]) == (3, row), site


def test_source_lines_quoting_an_error_text_are_not_errors() -> None:
    """A traceback (with `-W error`, or Python 3.13's multi-line statements) shows the source
    that raises the error: its quoted text is not another error."""
    log = (b'    "None of the inputs have requires_grad=True. Gradients will be None",\n'
           b'    "torch.utils.checkpoint: A different number of tensors was saved "\n'
           b"UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n")
    status, [error], _ = explain_json("-", input=log)
    assert (status, error["line"], error["occurrences"]) == (0, 3, 1)


def test_sites_path_must_exist(tmp_path: Path) -> None:
    result = run_cli("explain", "--sites", "missing", str(REAL / "dtype_cast.log"),
                     cwd=tmp_path)
    assert result.returncode == 2 and "'missing' does not exist" in result.stderr


def test_sites_of_a_signature_with_two_rules() -> None:
    """The cache appended twice: here module state (CKP401), not a cache passed in (CKP402)."""
    _, [error], _ = explain_json("--sites", str(LOGS / "programs" / "cache_twice.py"),
                                 str(REAL / "cache_twice.log"))
    sites = [(site["code"], site["row"]) for site in error["signatures"][0]["sites"]]
    assert ("CKP401", 10) in sites
