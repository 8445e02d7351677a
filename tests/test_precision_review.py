"""The labelled precision review (docs/precision.md, docs/precision-labels.csv) and the script
that makes it reproducible (scripts/precision_review.py). The corpora are not here: only the
file's shape, the summary the doc shows, and the script's pure parts are checked."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "precision_review.py"


def load_script():
    spec = importlib.util.spec_from_file_location("precision_review", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


review = load_script()


def test_every_labelled_row_is_well_formed():
    rows = review.read_labels()
    assert len(rows) >= 20
    assert {row["label"] for row in rows} <= set(review.VERDICTS)
    assert all(review.is_reviewed_code(row["code"]) for row in rows)
    assert {"CKP106", "CKP205"} <= {row["code"] for row in rows}


def test_the_doc_shows_the_summary_of_the_labels():
    result = subprocess.run([sys.executable, str(SCRIPT), "summary", "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("text", "problem"), [
    ("package,file,row,code,label\nx,a.py,1,CKP201,true\n", "columns"),
    ("package,file,row,code,label,reason\nx,a.py,1,CKP201,maybe,r\n", "malformed"),
    ("package,file,row,code,label,reason\nx,a.py,one,CKP201,true,r\n", "malformed"),
    ("package,file,row,code,label,reason\nx,a.py,1,CKP101,true,r\n", "malformed"),
    ("package,file,row,code,label,reason\nx,a.py,1,CKP201,true,\n", "malformed"),
    ("package,file,row,code,label,reason\nx,a.py,1,CKP201,true,r\nx,a.py,1,CKP201,false,r\n",
     "twice"),
])
def test_a_malformed_label_file_is_named(tmp_path, text, problem):
    labels = tmp_path / "labels.csv"
    labels.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        review.read_labels(labels)


def test_the_summary_counts_each_code_and_all():
    rows = [{"code": "CKP201", "label": "true"}, {"code": "CKP201", "label": "false"},
            {"code": "CKP401", "label": "debatable"}]
    table = review.summary_table(rows).splitlines()
    assert "| CKP201 | 2 | 1 | 0 | 1 | 50 | 50 |" in table
    assert "| CKP401 | 1 | 0 | 1 | 0 | 0 | 0 |" in table
    assert table[-1] == "| all | 3 | 1 | 1 | 1 | 33 | 33 |"


def test_grep_finds_calls_not_comments_strings_or_definitions():
    text = ('def checkpoint(fn):\n'
            '    """checkpoint(fn) in a docstring"""\n'
            '    # checkpoint(fn) in a comment\n'
            '    return torch.utils.checkpoint.checkpoint(fn, use_reentrant=False)\n'
            'y = self._gradient_checkpointing_func(\n    block, x)\n'
            'save_checkpoint(model)\n')
    assert review.checkpoint_calls(text) == [(4, "checkpoint"),
                                            (5, "_gradient_checkpointing_func")]


def test_the_sample_is_seeded_and_sorted():
    findings = [{"code": "CKP401", "filename": f"/p/m{i:02}.py", "location": {"row": i},
                 "message": "m"} for i in range(50)]
    results = {"pkg": {"root": "/p", "findings": findings, "sites": []}}
    first = review.sample(results, seed=13, per_code=30)
    assert first == review.sample(results, seed=13, per_code=30)
    assert len(first) == 30
    assert first == sorted(first, key=lambda row: (row["file"], row["row"]))
    assert first != review.sample(results, seed=14, per_code=30)
    assert len(review.sample(results, seed=13, per_code=60)) == 50


def test_a_package_linted_in_parts_counts_as_one_package():
    def part(name: str) -> dict:
        return {"root": "/src", "sites": [], "findings": [
            {"code": "CKP401", "filename": f"/src/transformers/models/{name}/m.py",
             "location": {"row": 3}, "message": "m"}]}
    rows = review.sample({"transformers.bert": part("bert"), "transformers.t5": part("t5")},
                         seed=13, per_code=30)
    assert [(row["package"], row["file"]) for row in rows] == [
        ("transformers", "transformers/models/bert/m.py"),
        ("transformers", "transformers/models/t5/m.py")]


def test_lint_in_parts_writes_each_folder_and_names_those_that_ran_out(tmp_path):
    folder = tmp_path / "src" / "pkg"
    folder.mkdir(parents=True)
    (folder / "m.py").write_text("x = 1\n", encoding="utf-8")
    review.lint_packages(tmp_path / "out", {"pkg.part": folder}, root=tmp_path / "src",
                         timeout=120)
    result = json.loads((tmp_path / "out" / "pkg.part.json").read_text(encoding="utf-8"))
    assert result["root"] == str(tmp_path / "src") and result["findings"] == []
    assert not (tmp_path / "out" / "not-linted.txt").exists()
    review.lint_packages(tmp_path / "slow", {"pkg.part": folder}, timeout=0.001)
    assert (tmp_path / "slow" / "not-linted.txt").read_text(encoding="utf-8").startswith(
        f"pkg.part {folder} (over 0.001 s)")
