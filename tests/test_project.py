"""Module lookup without parsing: packages' `__init__` files are parsed only when needed."""
from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from ckptlint.analysis.project import (
    module_bindings,
    module_level_names,
    plain_bindings,
    stored_bindings,
)
from ckptlint.config import Config
from ckptlint.engine.linter import FileResult, Linter
from ckptlint.storage.plain_data import ShapeError
from tests.cli_helpers import run_cli, write_project

FIXTURE = Path(__file__).parent / "fixtures" / "projects" / "package_attributes"


def parsed_paths(linter: Linter) -> set[str]:
    return {path.name if path.name != "__init__.py" else f"{path.parent.name}/__init__.py"
            for path, module in linter.project._by_path.items() if module is not None}


def lint_alone(path: Path) -> tuple[Linter, FileResult]:
    """`path` linted in this process by a fresh linter whose roots it gives."""
    linter = Linter(Config())
    linter.project.add_root_for(path)
    return linter, linter.lint_file(path, str(path))


def target_names(result) -> list[str]:
    """`file:qualname` of every resolved target of the result's sites."""
    return [ref.filename.rsplit("/", 1)[-1] + ":" + ref.qualname
            for record in result.sites for ref in record.targets]


def test_may_bind_reads_module_level_names() -> None:
    project = Linter(Config()).project
    project.add_root_for(FIXTURE / "model.py")
    init = FIXTURE / "netpkg" / "__init__.py"
    assert project.may_bind(init, "layers")  # `from netpkg.layers import layers`
    assert not project.may_bind(init, "blocks")  # never bound: the submodule
    assert not project.may_bind(init, "norms")  # `from netpkg import norms as norms`
    assert project.may_bind(init, "__all__")
    assert not project._by_path  # answered without libcst


def test_submodule_attribute_does_not_parse_the_package_init(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""Binds nothing."""\nVERSION = 1\n')
    (tmp_path / "pkg" / "blocks.py").write_text("def block(x):\n    return x * 2\n")
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""\
        from torch.utils.checkpoint import checkpoint
        import pkg


        def forward(x):
            return checkpoint(pkg.blocks.block, x, use_reentrant=False)
        """))
    linter, result = lint_alone(model)
    assert target_names(result) == ["blocks.py:block"]
    assert parsed_paths(linter) == {"model.py", "blocks.py"}


def test_package_init_that_binds_the_name_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def blocks(x):\n    return x\n")
    (tmp_path / "pkg" / "blocks.py").write_text("def block(x):\n    return x * 2\n")
    model = tmp_path / "model.py"
    model.write_text("from torch.utils.checkpoint import checkpoint\nimport pkg\n\n\n"
                     "def forward(x):\n    return checkpoint(pkg.blocks, x, use_reentrant=False)\n")
    linter, result = lint_alone(model)
    assert target_names(result) == ["__init__.py:blocks"]
    assert "pkg/__init__.py" in parsed_paths(linter)


UNPACKED_WHEEL = {
    # The top folder of an unpacked wheel has no `__init__.py`; the package inside does.
    "transformers/transformers/__init__.py": "",
    "transformers/transformers/modeling_layers.py": textwrap.dedent("""\
        from torch import nn


        class GradientCheckpointingLayer(nn.Module):
            pass
        """),
    "transformers/transformers/models/__init__.py": "",
    "transformers/transformers/models/llama/__init__.py": "",
    "transformers/transformers/models/llama/modeling_llama.py": textwrap.dedent("""\
        from ...modeling_layers import GradientCheckpointingLayer

        CALLS = []


        class LlamaDecoderLayer(GradientCheckpointingLayer):
            def forward(self, x):
                CALLS.append(x)
                return x
        """),
}


def test_package_root_wins_over_a_folder_above_it(tmp_path: Path) -> None:
    """Linted from the folder above an unpacked wheel, the modules are named from the
    package root (`transformers.models.llama...`), so relative imports reach them."""
    corpus = write_project(tmp_path / "corpus", UNPACKED_WHEEL)
    linted = corpus / "transformers/transformers/models/llama"
    result = run_cli("--format", "json", "--no-cache", "transformers/transformers/models/llama",
                     cwd=corpus, env={"CKPTLINT_STATS": "1"})
    stats = json.loads(result.stderr.strip().splitlines()[-1])
    findings = json.loads(result.stdout)
    assert stats["confirmed"] == 1 and stats["sites_analysed"] == 1, result.stderr
    assert [(f["code"], f["location"]["row"]) for f in findings] == [("CKP401", 8)]
    project = Linter(Config(root=corpus)).project
    project.add_root_for(linted / "modeling_llama.py")
    assert project.module_name(linted / "modeling_llama.py") == (
        "transformers.models.llama.modeling_llama", False)


def test_namespace_packages_keep_the_first_root(tmp_path: Path) -> None:
    """Without `__init__.py` files anywhere (namespace packages), the configuration root
    names the module, as before."""
    (tmp_path / "ns" / "inner").mkdir(parents=True)
    module = tmp_path / "ns" / "inner" / "mod.py"
    module.write_text("")
    project = Linter(Config(root=tmp_path)).project
    project.add_root_for(module)
    assert project.module_name(module) == ("ns.inner.mod", False)


def test_override_search_parses_only_files_that_define_the_method(tmp_path: Path) -> None:
    """`checkpoint(self._forward)` in a mixin: of the files deriving from it, only those
    with `def _forward` are parsed (one that merely calls it, or mentions it, is not)."""
    write_project(tmp_path, {
        "base.py": textwrap.dedent("""\
            from torch import nn
            from torch.utils.checkpoint import checkpoint


            class Mixin(nn.Module):
                def forward(self, x):
                    return checkpoint(self._forward, x, use_reentrant=False)
            """),
        "defines.py": textwrap.dedent("""\
            from base import Mixin


            class Defines(Mixin):
                def _forward(self, x):
                    return x
            """),
        "mentions.py": textwrap.dedent("""\
            from base import Mixin


            class Mentions(Mixin):
                def run(self, x):  # calls _forward, defines no _forward
                    return self._forward(x)
            """),
    })
    linter = Linter(Config(root=tmp_path))
    result = linter.lint_file(tmp_path / "base.py", "base.py")
    assert target_names(result) == ["defines.py:Defines._forward"]
    assert "mentions.py" not in parsed_paths(linter)


def test_in_an_environment_folder_the_project_scan_covers_only_the_linted_package(
        tmp_path: Path) -> None:
    """Distributions installed side by side in site-packages are projects of their own: a
    whole-project question about the linted package does not read the others (torch's tree
    linted in place read every installed package); in an ordinary folder every package
    found there is read."""
    files = {
        "linted/__init__.py": "",
        "linted/model.py": "class Block:\n    def run(self):\n        return 1\n",
        "neighbour/__init__.py": "",
        "neighbour/sub.py": "from linted.model import Block\n\n\nclass Sub(Block):\n"
                            "    def run(self):\n        return 2\n",
        "loose.py": "X = 1\n",
    }
    for folder in ("env/lib/site-packages", "repo"):
        write_project(tmp_path / folder, files)
    in_environment = Linter(Config(root=tmp_path)).project
    in_environment.add_root_for(tmp_path / "env/lib/site-packages/linted/model.py")
    assert [p.relative_to(tmp_path / "env/lib/site-packages").as_posix()
            for p in in_environment.source_files()] == ["linted/__init__.py", "linted/model.py"]
    in_folder = Linter(Config(root=tmp_path)).project
    in_folder.add_root_for(tmp_path / "repo/linted/model.py")
    assert [p.relative_to(tmp_path / "repo").as_posix() for p in in_folder.source_files()] == [
        "linted/__init__.py", "linted/model.py", "loose.py", "neighbour/__init__.py",
        "neighbour/sub.py"]


def test_module_path_looks_once_per_name_and_records_the_candidates_on_every_use(
        tmp_path: Path) -> None:
    """A run answers each dotted name once (the answer stands even if the file goes away
    mid-run), and every use records the files looked at, so that the result cache of each
    linted file that asks depends on them."""
    tmp_path = tmp_path.resolve()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "blocks.py").write_text("")
    project = Linter(Config()).project
    project.add_root_for(tmp_path / "pkg" / "blocks.py")
    recordings = []
    for _ in range(2):
        with project.dependencies.recording() as paths:
            assert project.module_path("pkg.blocks") == tmp_path / "pkg" / "blocks.py"
            assert project.module_path("pkg.missing") is None
        recordings.append(paths)
        (tmp_path / "pkg" / "blocks.py").unlink(missing_ok=True)
    assert recordings[0] == recordings[1]
    assert {tmp_path / "pkg" / "blocks.py", tmp_path / "pkg" / "missing.py",
            tmp_path / "pkg" / "missing" / "__init__.py"} <= recordings[0]
    project.add_root_for(tmp_path / "elsewhere" / "other.py")  # a new root: looked again
    assert project.module_path("pkg.blocks") is None


def test_the_module_bindings_survive_the_plain_data_round_trip_and_bad_shapes_are_misses(
) -> None:
    """`may_bind` reads a module's bindings from the summary store: plain data, checked."""
    text = textwrap.dedent("""\
        import a.b
        from . import sibling as sibling
        from .inner import x as why
        from pkg import own
        from star import *

        def f():
            global written
        """)
    found = module_bindings(ast.parse(text), text)
    assert stored_bindings(json.loads(json.dumps(plain_bindings(found)))) == found
    assert module_level_names(found, "pkg.mod", False, set()) == {
        "a", "sibling", "why", "own", "f", "written"}
    assert module_level_names(found, "pkg", True, {"pkg"}) == {"a", "why", "f", "written"}
    for wrong in (None, [], {"names": []}, {"names": [1], "from_imports": []},
                  {"names": [], "from_imports": [[0, "m", "n"]]},
                  {"names": [], "from_imports": [[-1, "m", "n", True]]},
                  {"names": [], "from_imports": [[0, "m", "n", 1]]}):
        with pytest.raises(ShapeError):
            stored_bindings(wrong)
