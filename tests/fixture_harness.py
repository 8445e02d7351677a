"""Annotated fixtures: every finding must be annotated and every annotation matched.

A trailing `# error: CKP201:12` expects that code at that 1-based column on its line (several:
`# error: CKP201:12, CKP203:5`); the column is where the finding starts, the hazard's own
expression (flake8-bugbear's fixture style). A comment alone on its line applies to the next
line. An annotation that does not parse, or one without its column, is an error naming the
file and line. `# fixture-config: KEY = VALUE` lines (TOML) set `[tool.ckptlint]` keys for the
fixture; by default CKP901 is also selected and `transformers-version = "4.46.0"`.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import tomllib

from ckptlint.config import parse_table
from ckptlint.engine.run import lint

ANNOTATION = re.compile(r"#\s*error:(?P<expected>.*)$")
EXPECTED = re.compile(r"\s*(?P<code>CKP\d{3}):(?P<column>[1-9]\d*)\s*")
CONFIG_LINE = re.compile(r"^#\s*fixture-config:\s*(?P<toml>.+)$")
DEFAULT_CONFIG = {"extend-select": ["CKP901"], "transformers-version": "4.46.0"}

class AnnotationError(ValueError):
    pass


def expected_findings(path: Path, display: str) -> Counter:
    expected: Counter = Counter()
    for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = ANNOTATION.search(line)
        if not match:
            continue
        target_row = row + 1 if line.lstrip().startswith("#") else row
        for item in match.group("expected").split(","):
            parsed = EXPECTED.fullmatch(item)
            if parsed is None:
                raise AnnotationError(
                    f"{display}:{row}: expected `# error: CKPnnn:COLUMN[, ...]`, got "
                    f"{match.group(0)!r}")
            expected[(display, target_row, int(parsed["column"]), parsed["code"])] += 1
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
    """(unexpected, missing, findings) for a fixture file or a fixture project folder; the
    counters hold (file, row, column, code)."""
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    root = target if target.is_dir() else target.parent
    config = fixture_config(files, root)
    result = lint([str(target)], config)
    actual = Counter((f.filename, f.start.row, f.start.column, f.code) for f in result.findings)
    expected: Counter = Counter()
    for path in files:
        expected += expected_findings(path, str(path))
    return actual - expected, expected - actual, result.findings


def fixture_targets(fixtures: Path) -> list[Path]:
    """Single-file fixtures, plus each folder under `projects/` as one multi-file fixture."""
    singles = sorted(p for p in fixtures.glob("*.py"))
    projects = sorted(p for p in (fixtures / "projects").glob("*") if p.is_dir())
    return [*singles, *projects]
