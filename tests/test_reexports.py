"""Names a module binds only by importing them are resolved without parsing it with libcst
(`ckptlint.analysis.reexports`), with the same answer the libcst scope model gives."""
from __future__ import annotations

import ast
import json
import os
import textwrap
from pathlib import Path

import pytest

from ckptlint.analysis.reexports import (
    imported_qualnames,
    plain_reexports,
    reexports,
    stored_reexports,
)
from ckptlint.analysis.scopes import BindingKind, build_scopes
from ckptlint.analysis.summary_store import FORMAT, text_digest
from ckptlint.config import Config
from ckptlint.engine.run import lint
from ckptlint.storage.plain_data import ShapeError
from ckptlint.syntax.source import parse_text
from tests.test_project import lint_alone, parsed_paths, target_names

ROOT = Path(__file__).parent.parent
TRICKY = textwrap.dedent("""\
    import os
    import a.b
    import a.b as ab
    from . import sibling
    from .. import above
    from .inner import (x, y as why)
    from __future__ import annotations
    try:
        from fast import impl
    except ImportError:
        from slow import impl
    if TYPE_CHECKING:
        from .typed import Typed
    else:
        Typed = None
    for _ in ():
        from loop import looped
    with ctx():
        from ctx import inside
    match os:
        case _:
            from matched import m
    import first as again
    import second as again
    from star import *
    assigned = 1
    from elsewhere import assigned

    def f():
        global written
        from inner_function import hidden

    class C:
        from in_class import member
    from elsewhere import written
    from elsewhere import C
    squares = [comp for comp in ()]
    from elsewhere import comp
    """)


def scope_answer(text: str, module_name: str, is_package: bool) -> dict:
    """Per name bound only by imports: (qualname, conditional) of each binding, libcst's
    scope model's answer."""
    scope = build_scopes(parse_text(text, "<test>"), module_name, is_package).module_scope
    return {bound: [(b.qualname, b.conditional) for b in bindings]
            for bound, bindings in scope.bindings.items()
            if all(b.kind == BindingKind.IMPORT for b in bindings)}


def assert_same_as_scopes(text: str, module_name: str, is_package: bool) -> int:
    expected = scope_answer(text, module_name, is_package)
    summary = reexports(ast.parse(text))
    for name, bindings in summary.items():
        answer = imported_qualnames(bindings, module_name, is_package)
        if answer is None:  # a relative import above the top: the scope model binds nothing
            assert name not in expected or len(expected[name]) < len(bindings)
            continue
        assert expected.get(name) == answer, name
    return len(summary)


def test_the_summary_answers_as_the_scope_model_does_on_tricky_imports() -> None:
    summary = reexports(ast.parse(TRICKY))
    assert set(summary) == {"os", "a", "ab", "sibling", "above", "x", "why", "annotations",
                            "impl", "looped", "inside", "m", "again"}
    assert assert_same_as_scopes(TRICKY, "pkg.sub.mod", False) == len(summary)
    assert assert_same_as_scopes(TRICKY, "pkg", True) == len(summary)
    assert imported_qualnames(summary["above"], "top", False) is None  # above the top


def fixture_packages() -> list[Path]:
    return sorted((ROOT / "tests" / "fixtures" / "projects").rglob("*.py"))


def real_modules() -> list[Path]:
    files = sorted((ROOT / "tests" / "fixtures").rglob("*.py"))
    files += sorted((ROOT / "ckptlint").rglob("*.py"))
    diffusers = os.environ.get("CKPTLINT_DIFFUSERS")
    if diffusers:
        files += sorted(Path(diffusers).rglob("__init__.py"))
    return files


def test_the_summary_answers_as_the_scope_model_does_on_the_fixture_projects() -> None:
    assert answered_as_the_scope_model(fixture_packages()) > 10


@pytest.mark.slow
def test_the_summary_answers_as_the_scope_model_does_on_real_modules() -> None:
    """Every fixture, ckptlint's own source and (with `CKPTLINT_DIFFUSERS`) every
    `__init__.py` of diffusers."""
    assert answered_as_the_scope_model(real_modules()) > 100


def answered_as_the_scope_model(paths: list[Path]) -> int:
    answered = 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            parse_text(text, str(path))
        except Exception:  # syntax-error fixtures: never summarised (CPython rejects them)
            continue
        for module_name, is_package in (("pkg.sub.mod", path.name == "__init__.py"),
                                        ("pkg.mod", False)):
            answered += assert_same_as_scopes(text, module_name, is_package)
    return answered


def test_the_summary_survives_the_plain_data_round_trip_and_bad_shapes_are_misses() -> None:
    summary = reexports(ast.parse(TRICKY))
    plain = json.loads(json.dumps(plain_reexports(summary)))
    assert stored_reexports(plain) == summary
    for wrong in (None, 3, "x", [], {"a": None}, {"a": [None]}, {"a": [[0, "m", "n"]]},
                  {"a": [[0, "m", "n", "yes"]]}, {"a": [[-1, "m", "n", True]]},
                  {"a": [[True, "m", "n", True]]}, {"a": [[0, 1, "n", True]]}):
        with pytest.raises(ShapeError):
            stored_reexports(wrong)


REEXPORTING = {
    "pkg/__init__.py": "from .blocks import block\nfrom .blocks import other as alias\n",
    "pkg/blocks.py": "def block(x):\n    return x * 2\n\n\ndef other(x):\n    return x\n",
    "model.py": textwrap.dedent("""\
        from torch.utils.checkpoint import checkpoint
        import pkg


        def forward(x):
            return checkpoint(pkg.block, x, use_reentrant=False)
        """),
}


def write(tree: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)


def test_a_reexported_name_is_resolved_without_parsing_the_package_init(tmp_path: Path) -> None:
    write(tmp_path, REEXPORTING)
    linter, result = lint_alone(tmp_path / "model.py")
    assert target_names(result) == ["blocks.py:block"]
    assert parsed_paths(linter) == {"model.py", "blocks.py"}


def test_an_edit_to_a_reexporting_module_changes_the_findings(tmp_path: Path,
                                                              monkeypatch) -> None:
    """The re-export summary is stored by the text's digest: retargeting the re-export must
    change what the checkpoint runs (here: a function that mutates global state)."""
    tree = tmp_path / "tree"
    write(tree, {**REEXPORTING, "pkg/blocks.py": textwrap.dedent("""\
        CALLS = []


        def block(x):
            return x * 2


        def other(x):
            CALLS.append(x)
            return x
        """)})
    monkeypatch.chdir(tree)
    monkeypatch.setenv("CKPTLINT_CACHE_DIR", str(tmp_path / "cache"))

    def findings(use_cache: bool = True, jobs: int = 1) -> list[dict]:
        result = lint(["model.py"], Config(root=tree), use_cache=use_cache, jobs=jobs)
        return [finding.to_json() for finding in result.findings]

    before = findings()
    init = tree / "pkg" / "__init__.py"
    stored = tmp_path / "cache" / f"summaries-{FORMAT}" / f"{text_digest(init.read_text())}.json"
    assert "reexports" in json.loads(stored.read_text())
    assert findings() == before == findings(use_cache=False)
    init.write_text("from .blocks import other as block\n")
    after = findings()
    assert after != before
    assert [f["code"] for f in after if f not in before] == ["CKP401"]  # `CALLS.append`
    assert after == findings(use_cache=False) == findings(jobs=2)
