"""Jupyter notebooks: linted like Python files, reported by cell, fixed cell by cell.

Every notebook here is written by nbformat (`tests/notebooks.py`), with markdown cells,
outputs (a stream and an image) and IPython magics.
"""

from __future__ import annotations

import json

import jsonschema
import nbformat

from tests.cli_helpers import CKP102_SOURCE, REPO, run_cli
from tests.notebooks import notebook_json

IMPORTS = "%matplotlib inline\nimport torch\nfrom torch.utils.checkpoint import checkpoint\n"
MODEL = '''\
!pip install -q einops
def block(x):
    return x * 2


def forward(x):
    %time y = 1
    return checkpoint(block, x)
'''
# Cell 1 is markdown: IMPORTS is cell 2, the markdown note cell 3, MODEL cell 4.
CELLS = (IMPORTS, ("markdown", "## The model"), MODEL)


def write(tmp_path, *cells, name="train.ipynb", **options):
    path = tmp_path / name
    path.write_text(notebook_json(*cells, **options), encoding="utf-8")
    return path


def test_folder_walk_lints_notebooks_by_cell(tmp_path):
    write(tmp_path, *CELLS)
    result = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("train.ipynb:cell 4:8:12: CKP102 "), result.stdout
    assert result.stdout.count("\n") == 1


def test_explicit_notebook_and_magics_masked(tmp_path):
    cells = ("%%bash\necho not python ( at all\n", "x = !ls\nfiles = %sx ls\ntorch.ones?\n"
             "??checkpoint\n!echo a \\\n  b\n", *CELLS)
    write(tmp_path, *cells)
    result = run_cli("check", "--no-cache", "--format", "json", "train.ipynb", cwd=tmp_path)
    findings = json.loads(result.stdout)
    assert [(f["code"], f["cell"], f["location"]["row"]) for f in findings] == [
        ("CKP102", 6, 8)]


def test_json_rows_site_and_fix_count_in_the_cell(tmp_path):
    write(tmp_path, *CELLS)
    result = run_cli("check", "--no-cache", "--format", "json", "train.ipynb", cwd=tmp_path)
    (finding,) = json.loads(result.stdout)
    assert finding["filename"] == "train.ipynb"
    assert finding["cell"] == 4
    assert finding["location"] == {"row": 8, "column": 12}
    assert finding["site"] == {"filename": "train.ipynb", "row": 8, "column": 12, "cell": 4}
    (edit,) = finding["fix"]["edits"]
    assert edit["location"] == {"row": 8, "column": 31}  # after `x`, in cell 4's row 8
    assert "line 8" not in finding["message"]
    schema = json.loads((REPO / "docs" / "schema" / "findings.schema.json").read_text())
    jsonschema.validate([finding], schema)


def test_segment_findings_name_their_site_by_cell(tmp_path):
    model = ("import random\n\ndef block(x):\n    return x * random.random()\n\n\n"
             "def forward(x):\n    return checkpoint(block, x, use_reentrant=False)\n")
    write(tmp_path, IMPORTS, model)
    result = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert result.stdout.startswith("train.ipynb:cell 3:4:16: CKP303 "), result.stdout
    assert "(checkpointed at train.ipynb:cell 3:8 via train.block)" in result.stdout


def test_places_in_messages_name_their_cell(tmp_path):
    """A message naming another line of the notebook (where state changes) names it by cell
    and row in it, like the finding's own place."""
    write(tmp_path, "import torch\nfrom torch.utils.checkpoint import checkpoint\n\nSCALE = 1.0\n",
          "def block(x):\n    return torch.tanh(x * SCALE)\n",
          "def step(x):\n    global SCALE\n    out = checkpoint(block, x, use_reentrant=False)\n"
          "    SCALE = 2.0\n    out.sum().backward()\n", name="train.ipynb")
    result = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert result.stdout.startswith("train.ipynb:cell 3:2:27: CKP201 "), result.stdout
    assert "which is rebound at train.ipynb:cell 4:4 in `step`" in result.stdout, result.stdout


def test_sarif_and_github_point_at_the_file_naming_the_cell(tmp_path):
    write(tmp_path, *CELLS)
    sarif = json.loads(run_cli("check", "--no-cache", "--format", "sarif", "train.ipynb",
                               cwd=tmp_path).stdout)
    (entry,) = sarif["runs"][0]["results"]
    assert entry["message"]["text"].startswith("cell 4: ")
    location = entry["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.ipynb"
    assert location["region"]["startLine"] == 8
    github = run_cli("check", "--no-cache", "--format", "github", "train.ipynb",
                     cwd=tmp_path).stdout
    assert github.startswith("::warning title=ckptlint (CKP102),file=train.ipynb,line=8,col=12,")
    assert "::CKP102 cell 4: " in github


def test_full_format_shows_the_cell_as_written(tmp_path):
    write(tmp_path, *CELLS)
    result = run_cli("check", "--no-cache", "--format", "full", "train.ipynb", cwd=tmp_path)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("train.ipynb:cell 4:8:12: CKP102 ")
    assert lines[2:4] == ["7 |     %time y = 1", "8 |     return checkpoint(block, x)"]


def test_noqa_in_a_cell(tmp_path):
    quiet = MODEL.replace("checkpoint(block, x)", "checkpoint(block, x)  # noqa: CKP102")
    write(tmp_path, IMPORTS, quiet)
    result = run_cli("check", "--no-cache", "--extend-select", "CKP902", "train.ipynb",
                     cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")


def test_fix_round_trip_rewrites_only_the_changed_cell(tmp_path):
    path = write(tmp_path, *CELLS, "print('unchanged')\n")
    before = nbformat.read(path, as_version=4)
    original = path.read_text(encoding="utf-8")
    result = run_cli("check", "--no-cache", "--fix", "--unsafe-fixes", "train.ipynb",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    after_text = path.read_text(encoding="utf-8")
    changed = [(old, new) for old, new in zip(original.splitlines(), after_text.splitlines())
               if old != new]
    assert changed == [('    "    return checkpoint(block, x)\\n"',
                        '    "    return checkpoint(block, x, use_reentrant=False)\\n"')]
    assert len(after_text.splitlines()) == len(original.splitlines())
    after = nbformat.read(path, as_version=4)
    nbformat.validate(after)
    for old, new in zip(before.cells, after.cells):
        assert (old.metadata, old.get("outputs")) == (new.metadata, new.get("outputs"))
    assert "%time y = 1" in after.cells[3].source and "!pip" in after.cells[3].source
    again = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (0, "")


def test_diff_shows_the_changed_cell(tmp_path):
    path = write(tmp_path, *CELLS)
    original = path.read_bytes()
    result = run_cli("check", "--no-cache", "--diff", "--unsafe-fixes", "train.ipynb",
                     cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith("--- a/train.ipynb:cell 4\n+++ b/train.ipynb:cell 4\n")
    assert "+    return checkpoint(block, x, use_reentrant=False)\n" in result.stdout
    assert path.read_bytes() == original


def test_add_noqa_writes_into_the_cell(tmp_path):
    path = write(tmp_path, *CELLS)
    result = run_cli("check", "--no-cache", "--add-noqa", "train.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    source = nbformat.read(path, as_version=4).cells[3].source
    assert "    return checkpoint(block, x)  # noqa: CKP102" in source


def test_invalid_notebook_json_is_ckp999(tmp_path):
    (tmp_path / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    (tmp_path / "v3.ipynb").write_text('{"nbformat": 3, "worksheets": []}', encoding="utf-8")
    (tmp_path / "model.py").write_text(CKP102_SOURCE, encoding="utf-8")
    result = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("broken.ipynb:1:1: CKP999 invalid notebook JSON: Expecting "), lines
    assert lines[1] == "model.py:9:12: CKP102 " + lines[1].split("CKP102 ", 1)[1]
    assert lines[2].startswith("v3.ipynb:1:1: CKP999 invalid notebook: nbformat 3 is not "
                               "supported"), lines
    assert "Traceback" not in result.stderr


def test_syntax_error_is_reported_in_its_cell(tmp_path):
    write(tmp_path, IMPORTS, "x = (\n", MODEL)
    result = run_cli("check", "--no-cache", "--format", "json", "train.ipynb", cwd=tmp_path)
    (finding,) = json.loads(result.stdout)
    assert (finding["code"], finding["cell"], finding["location"]["row"]) == ("CKP999", 3, 1)
    assert finding["data"]["line"] == 1


def test_max_file_size_counts_code_not_outputs(tmp_path):
    write(tmp_path, *CELLS)  # each code cell carries an image output
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\nmax-file-size = 400\n")
    result = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert (tmp_path / "train.ipynb").stat().st_size > 400
    assert "CKP102" in result.stdout, result.stdout
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\nmax-file-size = 100\n")
    result = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert result.stdout.startswith("train.ipynb:1:1: CKP999 code cells: file is larger than "
                                    "max-file-size"), result.stdout


def test_include_and_extend_include(tmp_path):
    write(tmp_path, *CELLS)
    (tmp_path / "model.py").write_text(CKP102_SOURCE, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[tool.ckptlint]\ninclude = ["*.py"]\n')
    result = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["model.py"]
    explicit = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert "train.ipynb:cell 4:" in explicit.stdout  # a file named is linted
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ckptlint]\ninclude = ["*.py"]\nextend-include = ["*.ipynb"]\n')
    result = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [
        "model.py", "train.ipynb"]
    (tmp_path / "pyproject.toml").write_text('[tool.ckptlint]\ninclude = "*.py"\n')
    bad = run_cli("check", "--no-cache", ".", cwd=tmp_path)
    assert bad.returncode == 2 and "key `include`: expected a list of strings" in bad.stderr


def test_stdin_notebook(tmp_path):
    text = notebook_json(*CELLS)
    result = run_cli("check", "--no-cache", "--stdin-filename", "nb.ipynb", "-", cwd=tmp_path,
                     input=text)
    assert result.stdout.startswith("nb.ipynb:cell 4:8:12: CKP102 "), result.stdout
    fixed = run_cli("check", "--no-cache", "--fix", "--unsafe-fixes", "--stdin-filename",
                    "nb.ipynb", "-", cwd=tmp_path, input=text)
    book = nbformat.reads(fixed.stdout, as_version=4)
    assert "checkpoint(block, x, use_reentrant=False)" in book.cells[3].source
    assert fixed.stdout == text.replace("checkpoint(block, x)",
                                        "checkpoint(block, x, use_reentrant=False)")


def test_other_kernels_are_not_linted(tmp_path):
    write(tmp_path, CKP102_SOURCE, language="julia")
    result = run_cli("check", "--no-cache", "train.ipynb", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")


def test_cache_answers_notebooks_by_cell(tmp_path):
    write(tmp_path, *CELLS)
    env = {"CKPTLINT_CACHE_DIR": str(tmp_path / "cache")}
    first = run_cli("check", "train.ipynb", cwd=tmp_path, env=env)
    second = run_cli("check", "train.ipynb", cwd=tmp_path, env=env)
    assert first.stdout == second.stdout
    assert second.stdout.startswith("train.ipynb:cell 4:8:12: CKP102 ")
