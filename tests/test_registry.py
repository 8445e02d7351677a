"""The registry (ckptlint/registry.py) is the one list of codes: everything else agrees with it.

The README's table, `ckptlint rule --all`, the pages in rules/ and the rule classes in
ckptlint/checks/ name the same codes; a rule class that is not registered fails here instead
of never running; what the registry says about fixes and dynamic mode is what happens; and
reading it loads none of the analysis.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import ckptlint.checks
from ckptlint.checks.base import Rule, SiteRule
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.cli import main
from ckptlint.config import parse_table
from ckptlint.dev import rule_table
from ckptlint.dev.scaffold import EXAMPLE, PLACEHOLDER
from ckptlint.dynamic.verdicts import Observations, RunInfo, judge_all
from ckptlint.engine.linter import load_class
from ckptlint.engine.run import lint
from ckptlint.findings import Finding, Position, SiteRef, TargetRef
from ckptlint.registry import RULES, Dynamic, FixKind
from ckptlint.rule_pages import SOURCE_PAGES, code_blocks, page_filename, section
from tests.cli_helpers import REPO

CODE = re.compile(r"CKP\d{3}")


def readme_table_codes() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index(rule_table.BEGIN):readme.index(rule_table.END)]
    return re.findall(r"^\| \[(CKP\d{3})\]\(rules/", table, re.M)


def rule_classes() -> dict[str, type]:
    """Every concrete rule class defined in a module of ckptlint/checks/, by "module:Class"."""
    found = {}
    for info in pkgutil.iter_modules(ckptlint.checks.__path__):
        module = importlib.import_module(f"ckptlint.checks.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == module.__name__ and issubclass(cls, Rule)
                    and "code" in vars(cls)):
                found[f"{module.__name__}:{name}"] = cls
    return found


def test_readme_table_is_the_registrys():
    result = subprocess.run([sys.executable, "-m", "ckptlint.dev", "rule-table", "--check"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_rule_table_check_notices_a_stale_table(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stale = re.sub(r"^\| \[CKP203\].*\n", "", readme, flags=re.M)
    (tmp_path / "README.md").write_text(stale, encoding="utf-8")
    assert not rule_table.update(tmp_path, RULES, check=True)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == stale
    assert not rule_table.update(tmp_path, RULES, check=False)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == readme


def test_every_listing_names_the_same_codes():
    registered = list(RULES)
    listed = CliRunner().invoke(main, ["rule", "--all"]).output
    pages = sorted(path.name[:6] for path in SOURCE_PAGES.glob("CKP*.md"))
    implemented = sorted(cls.code for cls in rule_classes().values())
    produced_elsewhere = sorted(code for code, info in RULES.items() if info.implementation is None)
    assert readme_table_codes() == registered
    assert [line.split()[0] for line in listed.splitlines()] == registered
    assert pages == sorted(registered)
    assert sorted(implemented + produced_elsewhere) == sorted(registered)


def test_codes_without_a_rule_class_are_produced_by_the_engine():
    """A code registered without an implementation must be made somewhere else."""
    sources = "\n".join(path.read_text(encoding="utf-8")
                        for path in (REPO / "ckptlint").rglob("*.py")
                        if path.name != "registry.py" and "checks" not in path.parts)
    for code, info in RULES.items():
        if info.implementation is None:
            assert f'"{code}"' in sources, f"{code} is registered without a rule, made nowhere"


def test_every_rule_class_is_registered():
    registered = {info.implementation for info in RULES.values()}
    unregistered = sorted(set(rule_classes()) - registered)
    assert not unregistered, (f"rule classes that never run: {unregistered}; add them to "
                              "ckptlint/registry.py")


@pytest.mark.parametrize("code", [c for c, info in RULES.items() if info.implementation])
def test_registered_implementation_imports_and_matches(code):
    cls = load_class(RULES[code].implementation)
    assert cls.code == code
    assert issubclass(cls, (SiteRule, SegmentRule))


def page_example_findings():
    """The findings of every rule page's Example blocks (as tests/test_rule_pages.py lints
    them)."""
    for code, info in RULES.items():
        if info.implementation is None:
            continue
        text = (SOURCE_PAGES / page_filename(code)).read_text(encoding="utf-8")
        for block in code_blocks(section(text, "Example")):
            yield from findings_of(block, code)


def findings_of(source: str, code: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        config = parse_table({"extend-select": [code], "transformers-version": "4.46.0"},
                             Path(folder) / "pyproject.toml")
        path = Path(folder) / "example.py"
        path.write_text(source, encoding="utf-8")
        return lint([str(path)], config, use_cache=False).findings


def test_fix_kinds_are_what_the_rules_offer():
    offered: dict[str, set[str]] = {}
    for finding in page_example_findings():
        if finding.fix is not None:
            offered.setdefault(finding.code, set()).add(finding.fix.applicability)
    for code, info in RULES.items():
        if info.fix is FixKind.NONE:
            assert code not in offered, f"{code} is registered without a fix but offers one"
        else:
            assert offered.get(code) == {info.fix.value}, (
                f"{code} is registered with a {info.fix.value} fix; its page's Example "
                f"offers {sorted(offered.get(code, []))}")


def test_dynamic_mode_judges_each_code_as_registered(tmp_path):
    """One reentrant call ran at the site (its model's checkpointing enabled at the findings'
    line), never replayed: static-only codes say so, reentrant-path codes are confirmed, the
    others (judged by replays) are unexercised."""
    import os

    real = os.path.realpath("m.py")
    events = [{"ev": "start", "pid": 1},
              {"ev": "enable", "pid": 1, "site": [real, 12, 5], "from_library": False},
              {"ev": "call", "id": 1, "pid": 1, "mode": "reentrant", "site": [real, 30, 5],
               "targets": [[real, 10, "Block.forward"]], "enabled_at": [real, 12, 5]},
              {"ev": "pass", "pid": 1, "call": 1, "phase": "forward"}]
    path = tmp_path / "obs.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    findings = [Finding(code, "x", "m.py", Position(12, 5), Position(12, 9),
                        site=SiteRef("m.py", 30, 5), chain=("Block.forward",),
                        target=TargetRef("m.py", 10, "Block.forward")) for code in RULES]
    judged = judge_all(findings, Observations.load(str(path)), run=RunInfo(returncode=0),
                       ckp501=False)
    expected = {Dynamic.STATIC_ONLY: "static-only", Dynamic.REENTRANT_PATH: "confirmed"}
    assert {f.code: f.verdict for f in judged} == {
        code: expected.get(info.dynamic, "unexercised") for code, info in RULES.items()}


def test_no_scaffold_placeholder_is_left():
    """`python -m ckptlint.dev new-rule` marks what a contributor must replace."""
    places = [*(REPO / "ckptlint" / "checks").glob("*.py"), *SOURCE_PAGES.glob("*.md"),
              *(REPO / "tests" / "fixtures").rglob("*.py")]
    left = sorted(str(path.relative_to(REPO)) for path in places
                  if PLACEHOLDER in (text := path.read_text(encoding="utf-8")) or EXAMPLE in text)
    left += [code for code, info in RULES.items() if PLACEHOLDER in info.summary]
    assert not left, f"scaffold placeholders left in {left}"


def test_reading_the_registry_loads_no_analysis():
    """Selection, `ckptlint rule` and `ckptlint rule --all` load neither libcst, the engine
    nor any rule module."""
    script = """
import sys
from click.testing import CliRunner
from ckptlint.cli import main
from ckptlint.checks import RULE_CLASSES
from ckptlint.config import parse_table
from pathlib import Path
assert parse_table({"select": ["CKP2"]}, Path("pyproject.toml")).enabled_codes()
for args in (["rule", "--all"], ["rule", "CKP201"], ["rule", "--all", "--format", "json"]):
    assert CliRunner().invoke(main, args).exit_code == 0
print(sorted(m for m in sys.modules if m.split(".")[0] in ("libcst", "torch")
             or m.startswith(("ckptlint.checks.", "ckptlint.engine"))))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
