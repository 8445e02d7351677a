"""Verdicts never depend on how a message is worded.

A copy of the `ckptlint` package has every message template reworded (the class attributes
`message` and `phrases` of the rules, module-level `*_MESSAGE` and `*_PHRASES`): same fields,
other words. The static engine of the copy must report the same findings with the same data,
and `ckptlint dynamic` run from the copy, with the real engine on a script that holds every
code dynamic mode judges, must give the same verdicts and the same evidence as the original.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from string import Formatter

import pytest

import ckptlint
from dynhelp import PY, ROOT, SCRIPTS

PACKAGE = Path(ckptlint.__file__).resolve().parent
FIXTURES = ROOT / "tests" / "fixtures"
TEMPLATE_ATTRIBUTES = {"message", "phrases"}
JUDGED = {"CKP101", "CKP102", "CKP103", "CKP201", "CKP203", "CKP204", "CKP301", "CKP302",
          "CKP303", "CKP401", "CKP501"}


def reword(template: str) -> str:
    """The same fields, other words: the literal words reversed and upper-cased."""
    words: list[str] = []
    fields: list[str] = []
    for literal, name, spec, _ in Formatter().parse(template):
        words += literal.split()
        if name is not None:
            fields.append("{" + name + (f":{spec}" if spec else "") + "}")
    text = " ".join(reversed(words)).upper().replace("{", "{{").replace("}", "}}")
    return " ".join(["REWORDED", text, *fields])


class Reword(ast.NodeTransformer):
    """Rewords the string values (never the dict keys) of template assignments."""

    def __init__(self) -> None:
        self.count = 0

    def value(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.count += 1
            return ast.copy_location(ast.Constant(reword(node.value)), node)
        if isinstance(node, ast.Dict):
            node.values = [self.value(value) for value in node.values]
        return node  # a shared table by name: reworded where it is defined

    def assignments(self, body: list[ast.stmt], wanted) -> None:
        for statement in body:
            if isinstance(statement, ast.Assign) and any(
                    isinstance(t, ast.Name) and wanted(t.id) for t in statement.targets):
                statement.value = self.value(statement.value)

    def visit_Module(self, node: ast.Module) -> ast.Module:
        self.assignments(node.body, lambda name: name.endswith(("_MESSAGE", "_PHRASES")))
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        self.assignments(node.body, TEMPLATE_ATTRIBUTES.__contains__)
        self.generic_visit(node)
        return node


@pytest.fixture(scope="module")
def reworded(tmp_path_factory) -> Path:
    """A folder holding the reworded copy of the package (to put first on PYTHONPATH)."""
    root = tmp_path_factory.mktemp("reworded")
    copy = root / "ckptlint"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    total = 0
    for path in copy.rglob("*.py"):
        transformer = Reword()
        tree = transformer.visit(ast.parse(path.read_text(encoding="utf-8")))
        if transformer.count:
            path.write_text(ast.unparse(tree) + "\n", encoding="utf-8")
            total += transformer.count
    assert total > 60, f"only {total} templates reworded"
    return root


def env_for(package_root: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "CKPTLINT_DYNAMIC_OUT")}
    env["PYTHONPATH"] = str(package_root)
    return env


def ckptlint_json(package_root: Path, args: list[str], cwd: Path) -> tuple[list[dict], str]:
    proc = subprocess.run([PY, "-m", "ckptlint", *args], cwd=cwd, env=env_for(package_root),
                          capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout), proc.stderr
    except ValueError:
        raise AssertionError(f"no JSON (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


def both(args: list[str], cwd: Path, reworded: Path) -> tuple[list[dict], list[dict]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        original, copy = pool.map(lambda root: ckptlint_json(root, args, cwd),
                                  (PACKAGE.parent, reworded))
    assert original[0], original[1][-3000:]
    return original[0], copy[0]


def facts(findings: list[dict]) -> list[tuple]:
    return [(f["filename"], f["location"]["row"], f["location"]["column"], f["code"],
             json.dumps(f["data"], sort_keys=True), f.get("verdict"), f.get("evidence"))
            for f in findings]


@pytest.mark.slow
def test_the_copy_reports_the_same_facts_in_other_words(tmp_path, reworded):
    """Every code the static engine reports (fixtures, examples, a broken file, an unused
    noqa): the same findings and data; every message differs."""
    project = tmp_path / "project"
    project.mkdir()
    for path in [*FIXTURES.glob("*.py"), *(ROOT / "examples").glob("*.py")]:
        shutil.copy(path, project / path.name)
    (project / "broken.py").write_text("from torch.utils.checkpoint import checkpoint\ndef f(:\n")
    (project / "noqa.py").write_text("x = 1  # noqa: CKP201\n")
    (project / "pyproject.toml").write_text(
        '[tool.ckptlint]\ntransformers-version = "4.46.0"\n'
        'extend-select = ["CKP901", "CKP902"]\n')
    original, copy = both(["--format", "json", "--no-cache", "."], project, reworded)
    assert facts(copy) == facts(original)
    assert {f["code"] for f in original} >= {"CKP101", "CKP102", "CKP103", "CKP104", "CKP105",
                                              "CKP201", "CKP202", "CKP203", "CKP204", "CKP301",
                                              "CKP302", "CKP303", "CKP401", "CKP901", "CKP902",
                                              "CKP999"}
    for before, after in zip(original, copy):
        assert after["message"].startswith("REWORDED") and after["message"] != before["message"]


@pytest.fixture(scope="module")
def dynamic_runs(reworded) -> tuple[list[dict], list[dict]]:
    """`ckptlint dynamic` on every_code.py, from the original package and from the copy."""
    pytest.importorskip("torch")
    args = ["dynamic", "--format", "json", "every_code.py", "--", PY, "every_code.py"]
    return both(args, SCRIPTS, reworded)


@pytest.mark.slow
def test_dynamic_verdicts_do_not_depend_on_the_wording(dynamic_runs):
    original, copy = dynamic_runs
    assert facts(copy) == facts(original)
    assert {f["code"] for f in original} == JUDGED
    verdicts = {(f["code"], f["verdict"]) for f in original}
    assert {("CKP201", "confirmed"), ("CKP204", "confirmed"), ("CKP401", "confirmed"),
            ("CKP101", "confirmed"), ("CKP102", "confirmed"), ("CKP103", "confirmed"),
            ("CKP302", "confirmed"), ("CKP303", "confirmed"), ("CKP501", "confirmed")} <= verdicts
    evidence = {f["code"]: f["evidence"] for f in copy}
    # The state each finding names was read in the child, found through `data` alone.
    assert "`SCALE` changed between forward and backward (1.0 → 3.0)" in evidence["CKP201"]
    assert "`self.use_tanh` changed between forward and backward (True → False)" in \
        evidence["CKP204"]
    assert "`self.calls` changed in the forward (0 → 1) and again in the replay (1 → 2)" in \
        evidence["CKP401"]
    assert all(f["message"].startswith("REWORDED") for f in copy)


@pytest.mark.slow
def test_dynamic_output_validates_against_the_schema(dynamic_runs):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "schema" / "findings.schema.json").read_text())
    original, _ = dynamic_runs
    errors = [error.message for error in
              jsonschema.Draft202012Validator(schema).iter_errors(original)]
    assert not errors, errors[:5]
    assert all(f["verdict"] and f["evidence"] for f in original)
