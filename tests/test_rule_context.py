"""The rules' context: answers kept for the run, the files they rest on, no state on rules.

The engine hands every rule one `RuleContext` per run; the binding model, the segment builder
and the memo record which files each answer rests on, also when a later file reuses it, so
a file's cache dependencies do not depend on what was linted before it.
"""

from __future__ import annotations

from pathlib import Path

from ckptlint.analysis.dependencies import DependencyRecorder
from ckptlint.config import parse_table
from ckptlint.engine.linter import Linter
from tests.cli_helpers import write_project

FIXTURES = Path(__file__).parent / "fixtures"

USES_SETTING = """\
import settings
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * settings.SCALE["a"]


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
"""


def linter_for(root: Path) -> Linter:
    return Linter(parse_table({"src": [str(root)]}, root / "pyproject.toml"))


def test_dependencies_do_not_depend_on_what_was_linted_before(tmp_path):
    """`peek.py` mentions `settings.SCALE` the way a write would, so finding where SCALE
    changes parses it: both files reading SCALE depend on it, the second one too, although
    it gets the answer the first one computed."""
    root = write_project(tmp_path / "p", {
        "settings.py": 'SCALE = {"a": 1}\n\n\ndef bump():\n    SCALE["a"] += 1\n',
        "peek.py": "import settings\n\n\ndef peek():\n    return settings.SCALE.get('a')\n",
        "first.py": USES_SETTING,
        "second.py": USES_SETTING,
    })
    alone = linter_for(root).lint_file(root / "second.py", "second.py")
    linter = linter_for(root)
    first = linter.lint_file(root / "first.py", "first.py")
    after = linter.lint_file(root / "second.py", "second.py")
    assert [f.code for f in alone.findings] == [f.code for f in after.findings] == ["CKP201"]
    peek = str((root / "peek.py").resolve())
    assert peek in alone.dependencies and peek in first.dependencies
    assert after.dependencies == alone.dependencies


def test_rules_keep_nothing_between_calls():
    """Per-run state lives in the context; a rule instance holds the context and nothing else."""
    linter = Linter(parse_table({"extend-select": ["CKP901"], "transformers-version": "4.46.0"},
                                FIXTURES / "pyproject.toml"))
    for path in sorted(FIXTURES.glob("*.py")):
        linter.lint_file(path, path.name)
    analysis = linter.analysis
    rules = [*analysis.site_rules, *analysis.segment_rules]
    assert len(rules) == len({rule.code for rule in rules}) >= 14
    for rule in rules:
        assert vars(rule) == {"context": analysis.context}, rule.code


def test_code_nested_too_deep_for_a_rule_is_the_files_ckp999(tmp_path):
    """The checkpoint call parses and resolves; reporting the `print` below it needs the
    position of a statement nested deeper than Python's recursion limit allows. The file
    gets one CKP999 saying so (no rule drops its finding silently)."""
    chain = "h.sum()" + " + 1" * 480
    source = ("import torch\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
              "def forward(x):\n    return checkpoint(block, x)\n\n\n"
              f"def block(x):\n    h = x * 2\n    if {chain} > 0:\n        print(h)\n"
              "    return h\n")
    root = write_project(tmp_path / "p", {"deep.py": source})
    result = linter_for(root).lint_file(root / "deep.py", "deep.py")
    assert [(f.code, f.message) for f in result.findings] == [
        ("CKP999", "nesting too deep to analyse")]


def test_a_kept_answer_records_its_files_each_time_it_is_used():
    recorder = DependencyRecorder()
    answers: dict = {}

    def compute():
        recorder.record(Path("/p/looked_at.py"))
        return 42

    with recorder.recording() as first:
        assert recorder.cached(answers, "key", compute) == 42
    with recorder.recording() as second:
        with recorder.recording() as inner:
            assert recorder.cached(answers, "key", lambda: 0) == 42
    assert first == second == inner == {Path("/p/looked_at.py")}
    recorder.record(Path("/p/outside.py"))  # no recording open: nothing to add it to
    with recorder.recording() as third:
        pass
    assert third == set()
