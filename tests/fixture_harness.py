"""Annotated fixtures: every finding must be annotated and every annotation matched.

A trailing `# error: CKP201` (several codes: `# error: CKP201, CKP203`) expects those codes on
its line; a comment alone on its line applies to the next line. `# fixture-config: KEY = VALUE`
lines (TOML) set `[tool.ckptlint]` keys for the fixture; by default CKP901 is also selected and
`transformers-version = "4.46.0"`.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import tomllib

from ckptlint.config import parse_table
from ckptlint.engine.run import lint

EXPECT = re.compile(r"#\s*error:\s*(?P<codes>CKP\d{3}(?:\s*,\s*CKP\d{3})*)")
CONFIG_LINE = re.compile(r"^#\s*fixture-config:\s*(?P<toml>.+)$")
DEFAULT_CONFIG = {"extend-select": ["CKP901"], "transformers-version": "4.46.0"}


def expected_findings(path: Path, display: str) -> Counter:
    expected: Counter = Counter()
    for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = EXPECT.search(line)
        if not match:
            continue
        target_row = row + 1 if line.lstrip().startswith("#") else row
        for code in re.split(r"\s*,\s*", match.group("codes")):
            expected[(display, target_row, code)] += 1
    return expected


def fixture_config(files: list[Path], root: Path):
    table = dict(DEFAULT_CONFIG)
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = CONFIG_LINE.match(line)
            if match:
                table.update(tomllib.loads(match.group("toml")))
    return parse_table(table, root / "pyproject.toml")


def check_fixture(target: Path) -> tuple[Counter, Counter, list]:
    """(unexpected, missing, findings) for a fixture file or a fixture project folder."""
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    root = target if target.is_dir() else target.parent
    config = fixture_config(files, root)
    result = lint([str(target)], config)
    actual = Counter((f.filename, f.start.row, f.code) for f in result.findings)
    expected: Counter = Counter()
    for path in files:
        expected += expected_findings(path, str(path))
    return actual - expected, expected - actual, result.findings


def fixture_targets(fixtures: Path) -> list[Path]:
    """Single-file fixtures, plus each folder under `projects/` as one multi-file fixture."""
    singles = sorted(p for p in fixtures.glob("*.py"))
    projects = sorted(p for p in (fixtures / "projects").glob("*") if p.is_dir())
    return [*singles, *projects]
