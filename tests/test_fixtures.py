from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixture_harness import check_fixture, fixture_targets

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
        "checkpoint(f, 1, use_reentrant=False)  # error: CKP101\n"  # annotated, not found
    )
    unexpected, missing, _ = check_fixture(fixture)
    assert set(unexpected) == {(str(fixture), 4, "CKP102")}
    assert set(missing) == {(str(fixture), 5, "CKP101")}
