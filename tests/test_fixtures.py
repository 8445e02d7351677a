from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixture_harness import AnnotationError, check_fixture, fixture_targets

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("target", fixture_targets(FIXTURES), ids=lambda p: p.name)
def test_fixture(target: Path) -> None:
    unexpected, missing, findings = check_fixture(target)
    details = "\n".join(f"{f.filename}:{f.start.row}:{f.start.column}: {f.code} {f.message}"
                        for f in findings)
    assert not unexpected, f"unannotated findings: {sorted(unexpected)}\nall findings:\n{details}"
    assert not missing, f"annotations not matched: {sorted(missing)}\nall findings:\n{details}"


def test_harness_catches_unannotated_and_missing(tmp_path: Path) -> None:
    fixture = tmp_path / "fx.py"
    fixture.write_text(
        "from torch.utils.checkpoint import checkpoint\n"
        "def f(x):\n    return x\n"
        "checkpoint(f, 1)\n"  # CKP102, not annotated
        "checkpoint(f, 1, use_reentrant=False)  # error: CKP101:1\n"  # annotated, not found
        "y = checkpoint(f, 1)  # error: CKP102:1\n"  # found at column 5, not 1
        "# error: CKP101:5\n"  # a comment alone: the next line
        "y = checkpoint(f, 1, use_reentrant=True)\n"
    )
    unexpected, missing, _ = check_fixture(fixture)
    name = str(fixture)
    assert set(unexpected) == {(name, 4, 1, "CKP102"), (name, 6, 5, "CKP102")}
    assert set(missing) == {(name, 5, 1, "CKP101"), (name, 6, 1, "CKP102")}


@pytest.mark.parametrize("annotation", ["# error: CKP102", "# error: CKP102:5, CKP101",
                                        "# error: CKP102:0", "# error: ckp102:5"])
def test_an_annotation_without_its_column_is_an_error(tmp_path: Path, annotation: str) -> None:
    fixture = tmp_path / "fx.py"
    fixture.write_text("from torch.utils.checkpoint import checkpoint\n"
                       f"y = checkpoint(f, 1)  {annotation}\n")
    with pytest.raises(AnnotationError, match=f"^{re.escape(str(fixture))}:2: expected "):
        check_fixture(fixture)
