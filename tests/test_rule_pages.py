"""Rule pages in rules/: one per code, the same sections, examples that do what they say.

An `## Example` block, linted with the default selection plus the page's code (and
`transformers-version = "4.46.0"`), must produce that code; a `## Use instead` block must
produce no finding at all.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

from ckptlint.config import parse_table
from ckptlint.engine.run import lint
from ckptlint.registry import RULES
from ckptlint.rule_pages import SECTIONS, SOURCE_PAGES, code_blocks, page_filename, section
from tests.cli_helpers import REPO, run_cli

# Examples that need a real run (dynamic/profile) or a broken file are checked differently.
NEEDS_A_RUN = {"CKP501", "CKP502"}
PAGE_NAME = re.compile(r"^(CKP\d{3})-([a-z0-9-]+)\.md$")

PAGES = sorted(SOURCE_PAGES.glob("*.md"))
CODES_WITH_PAGES = sorted(code for code in RULES if (SOURCE_PAGES / page_filename(code)).is_file())


def page(code: str) -> str:
    return (SOURCE_PAGES / page_filename(code)).read_text(encoding="utf-8")


def findings_for(code: str, source: str, tmp_path, extra: dict | None = None):
    table = {"extend-select": [code], "transformers-version": "4.46.0", **(extra or {})}
    config = parse_table(table, tmp_path / "pyproject.toml")
    path = tmp_path / "example.py"
    path.write_text(source, encoding="utf-8")
    return lint([str(path)], config).findings


def test_every_code_has_a_page():
    """Strict: lists every missing page at once."""
    missing = [page_filename(code) for code in RULES
               if not (SOURCE_PAGES / page_filename(code)).is_file()]
    assert not missing, f"rules/ lacks {len(missing)} page(s): {', '.join(missing)}"


def test_every_page_belongs_to_a_code():
    stray = []
    for path in PAGES:
        match = PAGE_NAME.match(path.name)
        if not match or match.group(1) not in RULES or RULES[match.group(1)].name != match.group(2):
            stray.append(path.name)
    assert not stray, f"pages whose name is not CKPnnn-<catalogue name>.md: {stray}"


@pytest.mark.parametrize("code", CODES_WITH_PAGES)
def test_page_has_the_sections_in_order(code):
    text = page(code)
    assert text.splitlines()[0] == f"# {code}: {RULES[code].name}"
    headings = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert headings == list(SECTIONS)
    for title in SECTIONS:
        assert section(text, title), f"{code}: `## {title}` is empty"
    for title in ("Example", "Use instead"):
        assert code_blocks(section(text, title)), f"{code}: `## {title}` has no ```python block"


@pytest.mark.parametrize("code", [c for c in CODES_WITH_PAGES
                                  if c not in NEEDS_A_RUN | {"CKP999"}])
def test_example_produces_the_code(code, tmp_path):
    for block in code_blocks(section(page(code), "Example")):
        found = {f.code for f in findings_for(code, block, tmp_path)}
        assert code in found, f"{code}: Example block gives {sorted(found)}:\n{block}"


@pytest.mark.parametrize("code", [c for c in CODES_WITH_PAGES if c not in NEEDS_A_RUN])
def test_use_instead_produces_nothing(code, tmp_path):
    for block in code_blocks(section(page(code), "Use instead")):
        found = [(f.start.row, f.code, f.message) for f in findings_for(code, block, tmp_path)]
        assert found == [], f"{code}: Use instead block gives {found}:\n{block}"


@pytest.mark.skipif("CKP999" not in CODES_WITH_PAGES, reason="no CKP999 page")
def test_parse_error_example_really_fails_to_parse(tmp_path):
    for block in code_blocks(section(page("CKP999"), "Example")):
        with pytest.raises(SyntaxError):
            ast.parse(block)
        assert [f.code for f in findings_for("CKP999", block, tmp_path)] == ["CKP999"]


def test_rule_command_prints_the_page():
    code = CODES_WITH_PAGES[0] if CODES_WITH_PAGES else None
    if code is None:
        pytest.skip("no pages yet")
    result = run_cli("rule", code, cwd=REPO)
    assert result.returncode == 0
    expected = page(code) if page(code).endswith("\n") else page(code) + "\n"
    assert result.stdout == expected
    by_name = run_cli("rule", RULES[code].name, cwd=REPO)
    assert by_name.stdout == result.stdout


def test_rule_all_lists_codes_and_names():
    result = run_cli("rule", "--all", cwd=REPO)
    assert result.returncode == 0
    listed = [line.split()[:2] for line in result.stdout.splitlines()]
    assert listed == [[code, info.name] for code, info in RULES.items()]


def test_rule_unknown_code_is_a_usage_error():
    result = run_cli("rule", "CKP000", cwd=REPO)
    assert result.returncode == 2
    assert "unknown rule" in result.stderr


@pytest.mark.parametrize(("urls", "expected"), [
    (["Rules, https://example.invalid/ckptlint/rules/"], "https://example.invalid/ckptlint/rules"),
    (["Homepage, https://example.invalid/home", "Repository, https://example.invalid/repo"],
     "https://example.invalid/repo/blob/main/rules"),
])
def test_published_page_address_comes_from_the_installed_project_urls(tmp_path, urls, expected):
    # A distribution's metadata earlier on sys.path stands for a ckptlint built with
    # [project.urls]: the editor's codeDescription and SARIF's helpUri link the published page.
    info = tmp_path / "ckptlint-99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ckptlint\nVersion: 99.0\n"
                                   + "".join(f"Project-URL: {url}\n" for url in urls))
    script = ("from ckptlint.rule_pages import help_uri\n"
              "from ckptlint.server.protocol import rule_url\n"
              "print(rule_url('CKP201'))\nprint(help_uri('CKP201'))\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    page_url = f"{expected}/{page_filename('CKP201')}"
    assert proc.stdout.splitlines() == [page_url, page_url]
