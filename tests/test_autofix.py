"""`--fix`, `--unsafe-fixes`, `--diff`, `--exit-non-zero-on-fix`: through the CLI and the
fix applier itself."""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ckptlint.findings import Edit, Finding, Fix, Position
from ckptlint.fix.autofix import apply_fixes, fix_file
from tests.cli_helpers import CKP102_SOURCE, run_cli, write_project

FIXTURES = Path(__file__).parent / "fixtures"
FIXED_CKP102 = CKP102_SOURCE.replace("checkpoint(block, x)",
                                     "checkpoint(block, x, use_reentrant=False)")

PARTIAL = '''\
from functools import partial

from torch.utils.checkpoint import checkpoint

ckpt = partial(checkpoint, preserve_rng_state=True)


def block(x):
    return x * 2


def forward(x):
    a = ckpt(block, x)
    b = ckpt(block, a)
    return b
'''

DOUBLE_STAR = '''\
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * 2


def forward(x, **kwargs):
    return checkpoint(block, x, **kwargs)
'''

HF = '''\
from transformers import AutoModel, TrainingArguments

model = AutoModel.from_pretrained("gpt2")
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={})
args = TrainingArguments("out", gradient_checkpointing=True)
model.gradient_checkpointing_enable()
'''


def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    result = run_cli("m.py", "--diff", "--unsafe-fixes", cwd=root)
    assert result.returncode == 1
    assert result.stdout.startswith("--- a/m.py\n+++ b/m.py\n@@ ")
    assert "-    return checkpoint(block, x)\n" in result.stdout
    assert "+    return checkpoint(block, x, use_reentrant=False)\n" in result.stdout
    assert (root / "m.py").read_text() == CKP102_SOURCE


def test_unsafe_fixes_are_not_applied_without_the_flag(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    diff = run_cli("m.py", "--diff", cwd=root)
    assert (diff.returncode, diff.stdout) == (0, "")
    assert "--unsafe-fixes" in diff.stderr
    fix = run_cli("m.py", "--fix", cwd=root)
    assert fix.returncode == 1
    assert "CKP102" in fix.stdout
    assert (root / "m.py").read_text() == CKP102_SOURCE


def test_fix_unsafe_fixes_writes_and_a_second_run_changes_nothing(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    first = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr  # all fixed
    assert first.stdout == ""
    assert "Fixed 1 finding" in first.stderr
    assert (root / "m.py").read_text() == FIXED_CKP102
    second = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert second.returncode == 0
    assert (root / "m.py").read_text() == FIXED_CKP102
    assert run_cli("m.py", "--diff", "--unsafe-fixes", cwd=root).stdout == ""
    assert not [p for p in root.iterdir() if "ckptlint-tmp" in p.name]  # nothing left behind


def test_exit_non_zero_on_fix(tmp_path):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE})
    result = run_cli("m.py", "--fix", "--unsafe-fixes", "--exit-non-zero-on-fix", cwd=root)
    assert result.returncode == 1
    assert (root / "m.py").read_text() == FIXED_CKP102
    again = run_cli("m.py", "--fix", "--unsafe-fixes", "--exit-non-zero-on-fix", cwd=root)
    assert again.returncode == 0  # nothing fixed, nothing left


def test_remaining_findings_are_reported_after_fixing(tmp_path):
    source = (CKP102_SOURCE
              + '\n\ndef other(x):\n    return checkpoint(block, x, use_reentrant=True)\n')
    root = write_project(tmp_path, {"m.py": source})
    result = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert result.returncode == 1
    assert result.stdout.startswith("m.py:13:12: CKP101 ")
    assert "CKP102" not in result.stdout


def test_crlf_line_endings_and_encoding_are_kept(tmp_path):
    text = ("# -*- coding: latin-1 -*-\n# caf\u00e9\n" + CKP102_SOURCE).replace("\n", "\r\n")
    root = write_project(tmp_path, {"m.py": text.encode("latin-1")})
    mode = stat.S_IMODE((root / "m.py").stat().st_mode) | stat.S_IXUSR
    os.chmod(root / "m.py", mode)
    result = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    data = (root / "m.py").read_bytes()
    assert data.count(b"\r\n") == text.count("\r\n") and b"\n" not in data.replace(b"\r\n", b"")
    assert data.decode("latin-1") == text.replace("checkpoint(block, x)",
                                                  "checkpoint(block, x, use_reentrant=False)")
    assert stat.S_IMODE((root / "m.py").stat().st_mode) == mode


def test_utf8_bom_is_kept(tmp_path):
    root = write_project(tmp_path, {"m.py": b"\xef\xbb\xbf" + CKP102_SOURCE.encode()})
    assert run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root).returncode == 0
    assert (root / "m.py").read_bytes() == b"\xef\xbb\xbf" + FIXED_CKP102.encode()


def test_one_partial_used_twice_is_fixed_once(tmp_path):
    root = write_project(tmp_path, {"m.py": PARTIAL})
    diff = run_cli("m.py", "--diff", "--unsafe-fixes", cwd=root)
    assert diff.stdout.count("use_reentrant=False") == 1
    assert "Would fix 2 findings" in diff.stderr
    result = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = (root / "m.py").read_text()
    assert "ckpt = partial(checkpoint, preserve_rng_state=True, use_reentrant=False)" in fixed
    assert fixed.count("use_reentrant") == 1
    ast.parse(fixed)


def test_never_edits_next_to_double_star_arguments(tmp_path):
    root = write_project(tmp_path, {"m.py": DOUBLE_STAR})
    result = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert (root / "m.py").read_text() == DOUBLE_STAR
    assert run_cli("m.py", "--diff", "--unsafe-fixes", cwd=root).stdout == ""
    assert "[*]" not in run_cli("m.py", "--format", "concise", "--unsafe-fixes", cwd=root).stdout
    assert result.returncode in (0, 1)


def test_transformers_fixes(tmp_path):
    root = write_project(tmp_path, {"train.py": HF})
    result = run_cli("train.py", "--fix", "--unsafe-fixes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = (root / "train.py").read_text()
    assert ('gradient_checkpointing_enable(gradient_checkpointing_kwargs='
            '{"use_reentrant": False})') in fixed
    assert ('TrainingArguments("out", gradient_checkpointing=True, '
            'gradient_checkpointing_kwargs={"use_reentrant": False})') in fixed
    assert fixed.endswith(
        '\nmodel.gradient_checkpointing_enable('
        'gradient_checkpointing_kwargs={"use_reentrant": False})\n')


HF_POSITIONAL = '''\
from transformers import AutoModel

model = AutoModel.from_pretrained("gpt2")
model.gradient_checkpointing_enable({"preserve_rng_state": True})
model.gradient_checkpointing_enable(None)
model.gradient_checkpointing_enable({"use_reentrant": False})
'''


def test_transformers_keywords_passed_by_position_are_never_passed_twice(tmp_path):
    root = write_project(tmp_path, {"train.py": HF_POSITIONAL})
    result = run_cli("train.py", "--fix", "--unsafe-fixes", cwd=root)
    fixed = (root / "train.py").read_text()
    assert fixed == HF_POSITIONAL.replace('({"preserve_rng_state": True})',
                                          '({"use_reentrant": False, "preserve_rng_state": True})')
    # `(None)` stays reported: it cannot take the keyword without passing the parameter twice.
    assert result.returncode == 1
    assert [line.split(": ")[1].split()[0] for line in result.stdout.splitlines()] == ["CKP104"]
    ast.parse(fixed)


def test_two_calls_on_one_line_are_two_findings_and_two_fixes(tmp_path):
    source = CKP102_SOURCE.replace("checkpoint(block, x)",
                                   "checkpoint(block, x) + checkpoint(block, x)")
    root = write_project(tmp_path, {"m.py": source})
    listed = run_cli("m.py", cwd=root)
    assert [line.split()[1] for line in listed.stdout.splitlines()] == ["CKP102", "CKP102"]
    assert "Would fix 2 findings" in run_cli("m.py", "--diff", "--unsafe-fixes",
                                             cwd=root).stderr
    assert run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root).returncode == 0
    assert (root / "m.py").read_text().count("use_reentrant=False") == 2


def test_fix_on_stdin_prints_the_fixed_source(tmp_path):
    root = write_project(tmp_path, {})
    result = run_cli("-", "--stdin-filename", "m.py", "--fix", "--unsafe-fixes", cwd=root,
                     input=CKP102_SOURCE)
    assert result.stdout == FIXED_CKP102
    assert result.returncode == 0
    assert not (root / "m.py").exists()


# -- the applier itself ------------------------------------------------------------------------
def finding(row: int, column: int, content: str, code: str = "CKP102",
            end: tuple[int, int] | None = None, applicability: str = "unsafe") -> Finding:
    start = Position(row, column)
    stop = Position(*end) if end else start
    return Finding(code, "m", "f.py", start, start,
                   fix=Fix(applicability, "t", (Edit(content, start, stop),)))


def test_overlapping_fixes_wait_for_the_next_pass():
    text = "f(a)\n"
    one = finding(1, 4, ", x=1")
    two = finding(1, 4, ", y=2")
    new_text, fixed = apply_fixes(text, [one, two], unsafe=True)
    assert new_text == "f(a, x=1)\n"
    assert fixed == [one]


def test_safe_only_without_unsafe():
    text = "f(a)\n"
    new_text, fixed = apply_fixes(text, [finding(1, 4, ", x=1")], unsafe=False)
    assert (new_text, fixed) == (text, [])
    new_text, fixed = apply_fixes(text, [finding(1, 4, ", x=1", applicability="safe")],
                                  unsafe=False)
    assert new_text == "f(a, x=1)\n"


def test_a_fix_that_breaks_the_file_is_not_applied():
    text = "f(a)\n"
    broken = finding(1, 4, ", x=")
    result, left = fix_file("f.py", text, [broken], unsafe=True, relint=lambda f, t: [])
    assert result.text == text and not result.changed
    assert "break" in result.error
    assert left == [broken]


def test_columns_count_characters_not_bytes():
    text = "s = '\u00e9\u00e9'; f(a)\r\nnext\r\n"
    new_text, _ = apply_fixes(text, [finding(1, 14, ", x=1")], unsafe=True)
    assert new_text == "s = '\u00e9\u00e9'; f(a, x=1)\r\nnext\r\n"


def test_fix_after_non_ascii_text_on_the_same_line(tmp_path):
    source = CKP102_SOURCE.replace("    return checkpoint(block, x)",
                                   "    s = '\u00e9\u6f22'; return checkpoint(block, x)")
    root = write_project(tmp_path, {"m.py": source})
    result = run_cli("m.py", "--fix", "--unsafe-fixes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "m.py").read_text(encoding="utf-8") == source.replace(
        "checkpoint(block, x)", "checkpoint(block, x, use_reentrant=False)")


RUN_FORWARD = '''\
import json, sys, warnings
import torch
warnings.simplefilter("ignore")
sys.path.insert(0, ".")
from fixed import forward
x = torch.linspace(-1, 1, 4, dtype=torch.float64, requires_grad=True)
out = forward(x)
out.sum().backward()
print(json.dumps([out.tolist(), x.grad.tolist()]))
'''


def test_fix_inside_backslash_continuations_parses_and_computes_the_same(tmp_path):
    """A lone `\\` line (which libcst leaves out of the code it numbers) and `\\` continuations
    inside the fixed calls: each keyword lands inside its own call, the file still parses, and
    the fixed forward computes the same values and gradients as the original."""
    pytest.importorskip("torch")
    source = (FIXTURES / "ckp102_backslash_fix.py").read_text()
    root = write_project(tmp_path, {"fixed.py": source, "run.py": RUN_FORWARD})
    result = run_cli("fixed.py", "--fix", "--unsafe-fixes", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = (root / "fixed.py").read_text()
    ast.parse(fixed)
    assert fixed == (source
                     .replace("checkpoint(block, x,", "checkpoint(block, x, use_reentrant=False,")
                     .replace("block, a)", "block, a, use_reentrant=False)")
                     .replace("  2)", "  2, use_reentrant=False)")
                     .replace("checkpoint(block, c)", "checkpoint(block, c, use_reentrant=False)"))
    after = subprocess.run([sys.executable, "run.py"], cwd=root, capture_output=True, text=True)
    (root / "fixed.py").write_text(source)
    before = subprocess.run([sys.executable, "run.py"], cwd=root, capture_output=True, text=True)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    assert json.loads(after.stdout) == json.loads(before.stdout)
