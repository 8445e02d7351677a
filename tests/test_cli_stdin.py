"""Editors: `ckptlint - --stdin-filename path/to/file.py` in a subprocess."""

from __future__ import annotations

import json

from tests.cli_helpers import CKP102_SOURCE, run_cli, write_project

HF = '''\
from transformers import AutoModel

model = AutoModel.from_pretrained("gpt2")
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={})
'''


def test_stdin_is_reported_under_the_given_name(tmp_path):
    root = write_project(tmp_path, {})
    result = run_cli("-", "--stdin-filename", "src/pkg/model.py", cwd=root, input=CKP102_SOURCE)
    assert result.returncode == 1
    assert result.stdout.startswith("src/pkg/model.py:9:12: CKP102 ")
    assert not (root / "src").exists()


def test_stdin_without_a_name(tmp_path):
    root = write_project(tmp_path, {})
    result = run_cli("-", cwd=root, input=CKP102_SOURCE)
    assert result.returncode == 1
    assert result.stdout.startswith("-:9:12: CKP102 ")


def test_config_is_resolved_from_the_stdin_filename(tmp_path):
    # The outer project turns CKP102 off; the inner one (nearest to the file) pins an old
    # transformers and keeps CKP102 on. Run from the outer folder as an editor would.
    outer = write_project(tmp_path, {}, config='ignore = ["CKP102"]\n')
    write_project(tmp_path / "inner", {}, config='transformers-version = "4.40.0"\n')
    as_inner = run_cli("-", "--stdin-filename", "inner/train.py", "--format", "json",
                       cwd=outer, input=CKP102_SOURCE + HF)
    found = {(f["filename"], f["code"]) for f in json.loads(as_inner.stdout)}
    assert found == {("inner/train.py", "CKP102"), ("inner/train.py", "CKP104")}
    as_outer = run_cli("-", "--stdin-filename", "train.py", "--format", "json", cwd=outer,
                       input=CKP102_SOURCE)
    assert json.loads(as_outer.stdout) == []
    assert as_outer.returncode == 0


def test_stdin_per_file_ignores_use_the_given_path(tmp_path):
    root = write_project(tmp_path, {},
                         config='[tool.ckptlint.per-file-ignores]\n"tests/*" = ["CKP102"]\n')
    ignored = run_cli("-", "--stdin-filename", "tests/test_m.py", cwd=root, input=CKP102_SOURCE)
    assert (ignored.returncode, ignored.stdout) == (0, "")
    kept = run_cli("-", "--stdin-filename", "src/m.py", cwd=root, input=CKP102_SOURCE)
    assert kept.returncode == 1


def test_stdin_parse_error_is_a_finding_not_a_crash(tmp_path):
    root = write_project(tmp_path, {})
    result = run_cli("-", "--stdin-filename", "m.py", cwd=root,
                     input="from torch.utils.checkpoint import checkpoint\ndef f(:\n")
    assert result.returncode == 1
    assert result.stdout.startswith("m.py:1:1: CKP999 ")


def test_stdin_with_a_flake8_style_format_for_editors(tmp_path):
    root = write_project(tmp_path, {})
    result = run_cli("-", "--stdin-filename", "m.py", "--format", "json-lines", cwd=root,
                     input=CKP102_SOURCE)
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["location"] == {"row": 9, "column": 12}


def test_stdin_force_exclude_skips_an_excluded_path(tmp_path):
    root = write_project(tmp_path, {}, config='extend-exclude = ["generated"]\n')
    skipped = run_cli("-", "--stdin-filename", "generated/m.py", "--force-exclude", cwd=root,
                      input=CKP102_SOURCE)
    assert (skipped.returncode, skipped.stdout) == (0, "")
    fixed = run_cli("-", "--stdin-filename", "generated/m.py", "--force-exclude", "--fix",
                    "--unsafe-fixes", cwd=root, input=CKP102_SOURCE)
    assert (fixed.returncode, fixed.stdout) == (0, CKP102_SOURCE)
    linted = run_cli("-", "--stdin-filename", "generated/m.py", cwd=root, input=CKP102_SOURCE)
    assert linted.returncode == 1  # without --force-exclude a named file is linted
