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
        class Block(nn.Module):
            def forward(self, x):
                return x
        def create_custom_forward(module):
            def custom_forward(*inputs):
                return module(*inputs)
            return custom_forward
        def run(layer: Block, x):
            return checkpoint(create_custom_forward(layer), x, use_reentrant=False)
        """, ["create_custom_forward.custom_forward"]),
    "self method a subclass defines": ("""
        class Mixin(nn.Module):
            def forward(self, x):
                return checkpoint(self._forward, x, use_reentrant=False)
        class Plain(Mixin):
            pass
        class A(Mixin):
            def _forward(self, x):
                return x
        class B(Plain):
            def _forward(self, x):
                return x
        class Unrelated:
            def _forward(self, x):
                return x
        """, ["A._forward", "B._forward"]),
    "self method and its overrides": ("""
        class Base(nn.Module):
            def forward_impl(self, x):
                return x
            def forward(self, x):
                return checkpoint(self.forward_impl, x, use_reentrant=False)
        class Child(Base):
            def forward_impl(self, x):
                return x * 2
        """, ["Base.forward_impl", "Child.forward_impl"]),
    "attribute only a subclass assigns": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        class Base(nn.Module):
            def forward(self, x):
                return checkpoint(self.body, x, use_reentrant=False)
        class Child(Base):
            def __init__(self):
                super().__init__()
                self.body = Block()
        """, ["Block.forward"]),
    "decorated method": ("""
        def ckpt(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return checkpoint(fn, *args, use_reentrant=False, **kwargs)
            return wrapper
        class Block(nn.Module):
            @ckpt
            def forward(self, x):
                return x
        @ckpt
        def mlp(x):
            return x
        """, ["Block.forward", "mlp"]),
    "helper building a list": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        def children(m):
            out = []
            out.append(("", m))
            return out
        def wrap(model: Block, x):
            for name, layer in children(model):
                checkpoint(layer, x, use_reentrant=False)
        """, ["Block.forward"]),
    "generator helper": ("""
        class Block(nn.Module):
            def forward(self, x):
                return x
        def blocks(m):
            yield "only", m
        def wrap(model: Block, x):
            for name, layer in blocks(model):
                checkpoint(layer, x, use_reentrant=False)
        """, ["Block.forward"]),
    "loop variable reused by a later loop": ("""
        class A(nn.Module):
            def forward(self, x):
                return x
        class B(nn.Module):
            def forward(self, x):
                return x
        def wrap(a: A, b: B, x):
            for layer in [a]:
                x = checkpoint(layer, x, use_reentrant=False)
            for layer in [b]:
                x = layer(x)
            return x
        """, ["A.forward"]),
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
    assert result.findings[0].data == {
        "api": "torch.utils.checkpoint.checkpoint", "mode": "non-reentrant",
        "reason": "`fn` is a parameter of `run`, so its value depends on each caller"}


UNRESOLVED = {
    "closure over a parameter": ("""
        def create_custom_forward(module):
            def custom_forward(*inputs):
                return module(*inputs)
            return custom_forward
        def run(block, x):
            return checkpoint(create_custom_forward(block), x, use_reentrant=False)
        """, "`block` is a parameter of `run`, so its value depends on each caller"),
    "lambda over a parameter": ("""
        def run(block, x):
            return checkpoint(lambda *a: block(*a), x, use_reentrant=False)
        """, "`block` is a parameter of `run`, so its value depends on each caller"),
    "method nobody defines": ("""
        class Mixin(nn.Module):
            def forward(self, x):
                return checkpoint(self._forward, x, use_reentrant=False)
        """, "`self._forward` is neither defined nor assigned in `Mixin` or any project "
             "subclass"),
    "library method unpacked": ("""
        class Model(nn.Module):
            pass
        def wrap(model: Model, x):
            for name, layer in model.named_children():
                checkpoint(layer, x, use_reentrant=False)
        """, "`Model.named_children` comes from the library class `torch.nn.Module`, whose "
             "code the linter does not follow"),
    "starred unpacking": ("""
        def children(m):
            return [("", m)]
        def wrap(model: nn.Module, x):
            for *names, layer in children(model):
                checkpoint(layer, x, use_reentrant=False)
        """, "`layer` is unpacked next to a starred name, so which part of the value it gets "
             "is unknown"),
    "decorator applied above another": ("""
        def ckpt(fn):
            def wrapper(*args):
                return checkpoint(fn, *args, use_reentrant=False)
            return wrapper
        def other(fn):
            return fn
        @ckpt
        @other
        def mlp(x):
            return x
        """, "`@ckpt` is applied to what the decorators below it return, not to the "
             "function itself"),
}


@pytest.mark.parametrize("name", sorted(UNRESOLVED))
def test_unresolved_forms_say_why_in_a_sentence(tmp_path: Path, name: str) -> None:
    source, reason = UNRESOLVED[name]
    path = tmp_path / "mod.py"
    path.write_text(HEADER + textwrap.dedent(source))
    result = lint([str(path)], Config(root=tmp_path, select=("CKP901",)))
    assert [f.data["reason"] for f in result.findings] == [reason]
    assert not result.sites[0].targets


def chains(tmp_path: Path, source: str) -> set[tuple[str, ...]]:
    """The chain of every segment finding (CKP401 on a `print` in each reached body)."""
    path = tmp_path / "mod.py"
    path.write_text(HEADER + textwrap.dedent(source))
    result = lint([str(path)], Config(root=tmp_path, select=("CKP401",)))
    return {finding.chain for finding in result.findings}


def test_closure_segment_runs_the_module_the_factory_was_given(tmp_path: Path) -> None:
    """Each call of the factory binds its own `module`: two calls, two segments."""
    assert chains(tmp_path, """
        class A(nn.Module):
            def forward(self, x):
                print("a")
                return x
        class B(nn.Module):
            def forward(self, x):
                print("b")
                return x
        def create_custom_forward(module):
            def custom_forward(*inputs, **kwargs):
                return module(*inputs, None, **kwargs)
            return custom_forward
        def run(a: A, b: B, x):
            x = checkpoint(create_custom_forward(a), x, use_reentrant=False)
            return checkpoint(create_custom_forward(b), x, use_reentrant=False)
        """) == {("mod.create_custom_forward.custom_forward", "A.forward"),
                 ("mod.create_custom_forward.custom_forward", "B.forward")}


def test_nested_factories_pass_their_arguments_through(tmp_path: Path) -> None:
    assert chains(tmp_path, """
        class A(nn.Module):
            def forward(self, x):
                print("a")
                return x
        def create_custom_forward(module):
            def custom_forward(*inputs):
                return module(*inputs)
            return custom_forward
        def make(layer):
            return create_custom_forward(layer)
        def run(a: A, x):
            return checkpoint(make(a), x, use_reentrant=False)
        """) == {("mod.create_custom_forward.custom_forward", "A.forward")}


def test_decorated_function_findings_name_the_checkpoint_inside_the_decorator(
        tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text(HEADER + textwrap.dedent("""
        def ckpt(fn):
            def wrapper(*args):
                return checkpoint(fn, *args, use_reentrant=False)
            return wrapper
        @ckpt
        def mlp(x):
            print(x)
            return x
        """))
    [finding] = lint([str(path)], Config(root=tmp_path, select=("CKP401",))).findings
    assert finding.chain == ("mod.mlp",)
    assert (finding.start.row, finding.site.row, finding.site.column) == (13, 9, 16)


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


def test_lambda_in_a_loop_sees_that_loop_variable(tmp_path: Path) -> None:
    assert chains(tmp_path, """
        class A(nn.Module):
            def forward(self, x):
                print("a")
                return x
        class B(nn.Module):
            def forward(self, x):
                return x
        def run(a: A, b: B, x):
            for layer in [a]:
                x = checkpoint(lambda *inputs: layer(*inputs), x, use_reentrant=False)
            for layer in [b]:
                x = layer(x)
            return x
        """) == {("mod.run.<lambda>", "A.forward")}


def test_function_reading_a_global_sees_its_last_binding(tmp_path: Path) -> None:
    """A function runs after the module's top level: a later rebinding is what it sees."""
    assert chains(tmp_path, """
        class A(nn.Module):
            def forward(self, x):
                return x
        class B(nn.Module):
            def forward(self, x):
                print("b")
                return x
        BLOCK = A()
        def run(x):
            return checkpoint(BLOCK, x, use_reentrant=False)
        BLOCK = B()
        """) == {("B.forward",)}


def test_modules_that_import_a_name_from_each_other_end_in_ckp901(tmp_path: Path) -> None:
    """A re-export cycle (a.py imports `block` from b.py, b.py from a.py) is not followed
    forever: the site is unresolved, with a reason, never a crash."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import block\n")
    (package / "b.py").write_text("from pkg.a import block\n")
    (package / "run.py").write_text(
        "from torch.utils.checkpoint import checkpoint\nfrom pkg.a import block\n\n"
        "def run(x):\n    return checkpoint(block, x, use_reentrant=False)\n")
    result = lint([str(package / "run.py")], Config(root=tmp_path, select=("CKP901", "CKP999")))
    assert [f.code for f in result.findings] == ["CKP901"]
    assert "too many names" in result.findings[0].data["reason"]
