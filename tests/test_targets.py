"""What each checkpoint site resolves to: the function bodies later rules walk into."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ckptlint.config import Config
from ckptlint.engine.run import lint

HEADER = """\
import functools
from functools import partial
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
"""

CASES = {
    "module function": ("""
        def block(x):
            return x
        def run(x):
            return checkpoint(block, x, use_reentrant=False)
        """, ["block"]),
    "nested def": ("""
        def run(x):
            def inner(t):
                return t
            return checkpoint(inner, x, use_reentrant=False)
        """, ["run.inner"]),
    "lambda": ("""
        def run(x):
            return checkpoint(lambda t: t * 2, x, use_reentrant=False)
        """, ["run.<lambda>"]),
    "self method": ("""
        class M(nn.Module):
            def _body(self, x):
                return x
            def forward(self, x):
                return checkpoint(self._body, x, use_reentrant=False)
        """, ["M._body"]),
    "submodule from __init__": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)
        """, ["Block.forward"]),
    "ModuleList loop variable": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        class M(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.layers = nn.ModuleList([Block() for _ in range(n)])
            def forward(self, x):
                for i, layer in enumerate(self.layers):
                    x = checkpoint(layer, x, use_reentrant=False)
                return x
        """, ["Block.forward"]),
    "ModuleList element": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        class M(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.layers = nn.ModuleList([Block() for _ in range(n)])
            def forward(self, x):
                return checkpoint(self.layers[0], x, use_reentrant=False)
        """, ["Block.forward"]),
    "forward attribute": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        def run(x):
            block = Block()
            return checkpoint(block.forward, x, use_reentrant=False)
        """, ["Block.forward"]),
    "__call__": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        def run(x):
            block = Block()
            return checkpoint(block.__call__, x, use_reentrant=False)
        """, ["Block.forward"]),
    "partial target": ("""
        def block(x, scale):
            return x * scale
        def run(x):
            return checkpoint(functools.partial(block, scale=2), x, use_reentrant=False)
        """, ["block"]),
    "inherited forward": ("""
        class Base(nn.Module):
            def forward(self, x):
                return x
        class Child(Base):
            pass
        def run(x):
            return checkpoint(Child(), x, use_reentrant=False)
        """, ["Base.forward"]),
    "custom forward factory": ("""
        def create_custom_forward(module):
            def custom_forward(*inputs):
                return module(*inputs)
            return custom_forward
        def run(layer, x):
            return checkpoint(create_custom_forward(layer), x, use_reentrant=False)
        """, ["create_custom_forward.custom_forward"]),
    "sequential modules": ("""
        class A(nn.Module):
            def forward(self, x):
                return x
        class B(nn.Module):
            def forward(self, x):
                return x
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.seq = nn.Sequential(A(), nn.ReLU(), B())
            def forward(self, x):
                return checkpoint_sequential(self.seq, 2, x, use_reentrant=False)
        """, ["A.forward", "B.forward"]),
    "library module": ("""
        def run(x):
            return checkpoint(nn.Linear(2, 2), x, use_reentrant=False)
        """, []),
}


def targets_of(tmp_path: Path, source: str) -> list[str]:
    path = tmp_path / "mod.py"
    path.write_text(HEADER + textwrap.dedent(source))
    result = lint([str(path)], Config(root=tmp_path))
    assert len(result.sites) == 1, result.sites
    return [target.qualname for target in result.sites[0].targets]


@pytest.mark.parametrize("name", sorted(CASES))
def test_target_resolution(tmp_path: Path, name: str) -> None:
    source, expected = CASES[name]
    assert targets_of(tmp_path, source) == expected


def test_parameter_is_unresolved_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text(HEADER + "def run(fn, x):\n    return checkpoint(fn, x, use_reentrant=False)\n")
    result = lint([str(path)], Config(root=tmp_path, select=("CKP901",)))
    assert [f.code for f in result.findings] == ["CKP901"]
    assert "`fn` is a parameter" in result.findings[0].message


def test_class_imported_from_another_file(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "blocks.py").write_text(
        "from torch import nn\n\nclass Block(nn.Module):\n"
        "    def forward(self, x):\n        return x\n")
    (package / "model.py").write_text(
        "from torch import nn\nfrom torch.utils.checkpoint import checkpoint\n"
        "from .blocks import Block\n\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.block = Block()\n\n    def forward(self, x):\n"
        "        return checkpoint(self.block, x, use_reentrant=False)\n")
    result = lint([str(package / "model.py")], Config(root=tmp_path))
    [site] = result.sites
    [target] = site.targets
    assert target.qualname == "Block.forward"
    assert target.filename.endswith("blocks.py") and target.row == 4
