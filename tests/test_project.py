"""Module lookup without parsing: packages' `__init__` files are parsed only when needed."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ckptlint.config import Config
from ckptlint.engine.linter import Linter

FIXTURE = Path(__file__).parent / "fixtures" / "projects" / "package_attributes"


def parsed_paths(linter: Linter) -> set[str]:
    return {path.name if path.name != "__init__.py" else f"{path.parent.name}/__init__.py"
            for path, module in linter.project._by_path.items() if module is not None}


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
    linter = Linter(Config())
    linter.project.add_root_for(model)
    result = linter.lint_file(model, str(model))
    assert target_names(result) == ["blocks.py:block"]
    assert parsed_paths(linter) == {"model.py", "blocks.py"}


def test_package_init_that_binds_the_name_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def blocks(x):\n    return x\n")
    (tmp_path / "pkg" / "blocks.py").write_text("def block(x):\n    return x * 2\n")
    model = tmp_path / "model.py"
    model.write_text("from torch.utils.checkpoint import checkpoint\nimport pkg\n\n\n"
                     "def forward(x):\n    return checkpoint(pkg.blocks, x, use_reentrant=False)\n")
    linter = Linter(Config())
    linter.project.add_root_for(model)
    result = linter.lint_file(model, str(model))
    assert target_names(result) == ["__init__.py:blocks"]
    assert "pkg/__init__.py" in parsed_paths(linter)
