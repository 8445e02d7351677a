"""Generated programs through the whole pipeline: never a traceback, every finding a CKP code
at a real position. Fuzzing is slow: the quick command (`-m "not slow"`) leaves it out, and
without hypothesmith installed only this module is skipped."""

from __future__ import annotations

import pytest

from ckptlint.config import Config
from ckptlint.engine.run import lint

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")

pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

SITE = "from torch.utils.checkpoint import checkpoint\n"


@hypothesis.settings(max_examples=120, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(source=hypothesmith.from_grammar())
def test_generated_programs_through_the_full_pipeline(source: str) -> None:
    config = Config()
    for text in (source, SITE + source + "\ny = checkpoint(f, x)\n"):
        result = lint([], config, stdin_text=text, stdin_filename="fuzz.py", jobs=1)
        for finding in result.findings:
            assert finding.code.startswith("CKP")
            assert finding.start.row >= 1 and finding.start.column >= 1


@hypothesis.settings(max_examples=60, deadline=None, derandomize=True,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(source=hypothesmith.from_node())
def test_generated_valid_modules_through_the_full_pipeline(source: str) -> None:
    text = SITE + source + "\ny = checkpoint(f, x)\n"
    result = lint([], Config(), stdin_text=text, stdin_filename="fuzz.py", jobs=1)
    assert all(f.code.startswith("CKP") for f in result.findings)
