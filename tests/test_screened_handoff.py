"""A file the screening confirmed is analysed without being screened again.

The screening (text tests, CPython's parse, the confirmation) hands what it found of each
confirmed file (`Screened`: the text's digest and its statement starts) to the analysis,
in this process or in workers forked after it; the analysis skips the screens while the
file's text is the one screened, and screens a file that changed in between afresh.
"""

from __future__ import annotations

from pathlib import Path

from ckptlint.config import Config
from ckptlint.engine import linter as linter_module
from ckptlint.engine.linter import Linter, examine
from ckptlint.engine.run import lint
from tests.cli_helpers import CKP102_SOURCE

CLEAN = "import torch\n\n\ndef forward(x):\n    return torch.relu(x)\n"


def counted_parses(monkeypatch) -> list[str]:
    parsed: list[str] = []
    original = linter_module.parse_ast
    monkeypatch.setattr(linter_module, "parse_ast",
                        lambda text, display: parsed.append(display) or original(text, display))
    return parsed


def screened_linter(tmp_path: Path, source: str) -> tuple[Linter, Path]:
    path = tmp_path / "mod.py"
    path.write_text(source)
    linter = Linter(Config(root=tmp_path))
    screened = examine(linter, None, path, "mod.py", analyse=False)
    assert screened.candidate and screened.screened is not None
    linter.screened[path] = screened.screened
    return linter, path


def test_a_confirmed_file_is_analysed_without_a_second_parse_or_confirmation(
        tmp_path: Path, monkeypatch) -> None:
    linter, path = screened_linter(tmp_path, CKP102_SOURCE)
    parsed = counted_parses(monkeypatch)
    monkeypatch.setattr(Linter, "may_hold_site", lambda *args: False)  # never asked again
    result = examine(linter, None, path, "mod.py", analyse=True).result
    assert result is not None and result.confirmed
    assert [f.code for f in result.findings] == ["CKP102"] and parsed == []
    assert path not in linter.screened  # handed over once


def test_a_file_changed_after_its_screening_is_screened_again(tmp_path: Path,
                                                              monkeypatch) -> None:
    parsed = counted_parses(monkeypatch)
    linter, path = screened_linter(tmp_path, CKP102_SOURCE)
    path.write_text(CLEAN)  # no site now: the text tests reject it, nothing is parsed
    parsed.clear()
    result = examine(linter, None, path, "mod.py", analyse=True).result
    assert result is not None and not result.confirmed and result.findings == []
    assert parsed == []
    linter, path = screened_linter(tmp_path, CKP102_SOURCE)
    path.write_text(CKP102_SOURCE.replace("block, x", "block,  x"))  # still a site
    parsed.clear()
    result = examine(linter, None, path, "mod.py", analyse=True).result
    assert result is not None and [f.code for f in result.findings] == ["CKP102"]
    assert parsed == ["mod.py"]  # screened afresh


def test_findings_are_the_same_with_and_without_the_hand_over(tmp_path: Path,
                                                              monkeypatch) -> None:
    for index in range(3):
        (tmp_path / f"m{index}.py").write_text(CKP102_SOURCE + "\n" * index)
    handed = lint([str(tmp_path)], Config(root=tmp_path), use_cache=False, jobs=1)
    monkeypatch.setattr(Linter, "__init__", lambda self, config, _init=Linter.__init__: (
        _init(self, config), setattr(self, "screened", NeverKept()))[0])
    screened_again = lint([str(tmp_path)], Config(root=tmp_path), use_cache=False, jobs=1)
    assert [f.to_json() for f in handed.findings] == [f.to_json()
                                                      for f in screened_again.findings]
    assert [f.code for f in handed.findings] == ["CKP102"] * 3


class NeverKept(dict):
    def __setitem__(self, key, value) -> None:
        pass
