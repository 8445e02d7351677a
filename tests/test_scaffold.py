"""`python -m ckptlint.dev new-rule`, end to end, in a copy of this checkout.

The new rule touches four places (its module, page, fixture and one registry entry) plus two
generated files (the README table and the JSON Schema of the output); the engine runs it,
`ckptlint rule` prints its page, and the fixture, page and registry tests pass for it, while
the placeholder guard does not let it be merged as it is. The copy is thrown away: no example
rule stays in the repository.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import REPO

SUMMARY = "a call of the example hazard inside a segment"


def checkout_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, check=True, capture_output=True).stdout.decode()
    return [name for name in out.split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("checkout")
    for name in checkout_files():
        if name.startswith(("bench/", "examples/", "tests/dynamic/", "tests/profile/")):
            continue
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return root


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`python ARGS` in the copy, importing the copy's ckptlint (console scripts too)."""
    env = {**os.environ, "PYTHONPATH": str(root), "CKPTLINT_CACHE_DIR": str(root / ".cache")}
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True,
                          env=env, timeout=300)


def snapshot(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): path.read_text(encoding="utf-8", errors="replace")
            for path in root.rglob("*") if path.is_file() and ".cache" not in path.parts
            and "__pycache__" not in path.parts}


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines."""
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return ([line[2:] for line in diff if line.startswith("- ")],
            [line[2:] for line in diff if line.startswith("+ ")])


@pytest.mark.slow
def test_new_segment_rule_end_to_end(copy):
    before = snapshot(copy)
    made = run(copy, "-m", "ckptlint.dev", "new-rule", "CKP950", "example-hazard",
               "--summary", SUMMARY)
    assert made.returncode == 0, made.stderr
    after = snapshot(copy)

    module, page = "ckptlint/checks/example_hazard.py", "rules/CKP950-example-hazard.md"
    fixture = "tests/fixtures/ckp950_example_hazard.py"
    assert sorted(after.keys() - before.keys()) == sorted([module, page, fixture])
    assert sorted(name for name in before if after.get(name) != before[name]) == [
        "README.md", "ckptlint/registry.py", "docs/schema/findings.schema.json"]
    removed, added = changed_lines(before["ckptlint/registry.py"], after["ckptlint/registry.py"])
    assert removed == [] and added[0].lstrip().startswith('RuleInfo("CKP950", "example-hazard"')
    assert "".join(added).count("RuleInfo(") == 1
    removed, added = changed_lines(before["README.md"], after["README.md"])
    assert removed == [] and len(added) == 1 and added[0].startswith(
        "| [CKP950](rules/CKP950-example-hazard.md) | example-hazard | " + SUMMARY)

    # The engine runs it, where the fixture says, and nowhere else.
    linted = run(copy, "-m", "ckptlint", "--format", "json", fixture)
    found = [(f["code"], f["location"]["row"], f["location"]["column"])
             for f in json.loads(linted.stdout)]
    annotated = [("CKP950", row, int(match.group(1)))
                 for row, line in enumerate(after[fixture].splitlines(), start=1)
                 if (match := re.search(r"# error: CKP950:(\d+)", line))]
    assert found == annotated and len(annotated) == 1

    shown = run(copy, "-m", "ckptlint", "rule", "CKP950")
    assert shown.returncode == 0 and shown.stdout == after[page]

    passing = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "tests/test_fixtures.py::test_fixture[ckp950_example_hazard.py]",
                  "tests/test_rule_pages.py", "-k", "CKP950 or every or lists",
                  "tests/test_registry.py", "tests/test_finding_data.py::"
                  "test_rule_pages_document_the_data_fields[CKP950]",
                  "tests/test_finding_data.py::test_the_schema_in_the_repository_is_current",
                  "tests/test_finding_data.py::test_templates_name_only_fields_of_their_code",
                  "tests/test_finding_data.py::test_fixtures_and_rule_page_examples_give_valid_json",
                  "--deselect", "tests/test_registry.py::test_no_scaffold_placeholder_is_left")
    assert passing.returncode == 0, passing.stdout[-3000:]
    assert "CKP950" in run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--collect-only", "tests/test_rule_pages.py").stdout

    # Not mergeable as generated: the placeholders must be replaced.
    guard = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "tests/test_registry.py::test_no_scaffold_placeholder_is_left")
    assert guard.returncode == 1 and module in guard.stdout

    # Without its registry entry the rule would never run: that fails too.
    registry = copy / "ckptlint" / "registry.py"
    registry.write_text(before["ckptlint/registry.py"], encoding="utf-8")
    unregistered = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "tests/test_registry.py::test_every_rule_class_is_registered")
    assert unregistered.returncode == 1
    assert "ckptlint.checks.example_hazard:ExampleHazard" in unregistered.stdout
    for name in (module, page, fixture):
        (copy / name).unlink()
    for name in ("README.md", "docs/schema/findings.schema.json"):
        (copy / name).write_text(before[name], encoding="utf-8")


@pytest.mark.slow
def test_new_site_rule_runs_where_its_fixture_says(copy):
    made = run(copy, "-m", "ckptlint.dev", "new-rule", "CKP150", "example-call", "--kind", "site",
               "--severity", "error", "--summary", "a checkpoint call passing the example "
               "keyword, with a summary long enough to be wrapped in the registry")
    assert made.returncode == 0, made.stderr
    passing = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "tests/test_fixtures.py::test_fixture[ckp150_example_call.py]",
                  "tests/test_rule_pages.py", "-k", "CKP150 or every or lists",
                  "tests/test_registry.py::test_every_listing_names_the_same_codes",
                  "tests/test_registry.py::test_readme_table_is_the_registrys",
                  "tests/test_finding_data.py::test_rule_pages_document_the_data_fields[CKP150]",
                  "tests/test_finding_data.py::test_the_schema_in_the_repository_is_current")
    assert passing.returncode == 0, passing.stdout[-3000:]
    fixture = (copy / "tests/fixtures/ckp150_example_call.py").read_text(encoding="utf-8")
    linted = json.loads(run(copy, "-m", "ckptlint", "--format", "json",
                            "tests/fixtures/ckp150_example_call.py").stdout)
    (annotated,) = re.findall(r"# error: CKP150:(\d+)", fixture)
    assert [(f["code"], f["severity"], f["location"]["column"]) for f in linted] == [
        ("CKP150", "error", int(annotated))]


def test_new_rule_refuses_a_taken_code_or_name(copy):
    for args, wanted in ((["CKP201", "other-name"], "CKP201 is taken (mutable-state-read)"),
                         (["CKP960", "foreign-rng"], "the name `foreign-rng` is taken (CKP303)"),
                         (["CKP96", "x"], "`CKP96` is not a rule code"),
                         (["CKP960", "Bad_Name"], "`Bad_Name` is not a rule name")):
        result = run(copy, "-m", "ckptlint.dev", "new-rule", *args)
        assert result.returncode == 2
        assert result.stderr == f"ckptlint.dev: error: {wanted}" + (
            " (CKP and three digits)\n" if "rule code" in wanted else
            " (lower-case words joined by `-`)\n" if "rule name" in wanted else "\n")
