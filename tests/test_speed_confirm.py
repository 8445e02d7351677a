"""The shortcuts that make ckptlint fast must never change what it finds.

- The text prefilter and the confirmation (`ckptlint.screen.confirm`: a text test, then an
  `ast` test) may only reject files in which `sites.py` finds no site: checked on every
  fixture, every example, hand-made tricky spellings, and (slow) every file of the installed
  torch package.
- `ckptlint.syntax.positions` gives exactly libcst's PositionProvider positions.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from ckptlint.config import Config
from ckptlint.engine.linter import FileResult, Linter
from ckptlint.syntax.positions import LONE_CONTINUATION, Positions
from ckptlint.syntax.reading import SourceError, statement_starts
from tests.fixture_harness import fixture_config

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
spec = importlib.util.find_spec("torch")
TORCH = Path(spec.origin).parent if spec and spec.origin else None


def site_count(linter: Linter, path: Path, text: str) -> int:
    """Sites `sites.py` finds with no shortcut at all (libcst on the whole file)."""
    result = FileResult(str(path))
    linter.analysis.lint_module(path, str(path), text, result)
    return len(result.sites)


def passes_shortcuts(linter: Linter, path: Path, text: str) -> bool:
    if not linter.may_hold_site(path, text):
        return False
    name, is_package = linter.project.module_name(path)
    return linter.confirmer.may_hold_site(ast.parse(text), text, name, is_package)


def assert_no_false_rejection(linter: Linter, path: Path, text: str | None = None) -> int:
    text = path.read_text(encoding="utf-8") if text is None else text
    try:
        sites = site_count(linter, path, text)
    except SourceError:
        return 0
    if sites:
        assert passes_shortcuts(linter, path, text), f"{path}: {sites} site(s) but rejected"
    return sites


def python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py")) if folder.is_dir() else []


@pytest.mark.parametrize("path", python_files(FIXTURES) + python_files(EXAMPLES),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_fixtures_and_examples_with_sites_pass_the_shortcuts(path: Path) -> None:
    root = path.parent
    config = fixture_config([path], root) if FIXTURES in path.parents else Config(root=root)
    linter = Linter(config)
    linter.project.add_root_for(path)
    assert_no_false_rejection(linter, path)


def test_the_shortcuts_reject_plain_mentions() -> None:
    linter = Linter(Config())
    for text in (
        "# we used to call checkpoint here\nx = 1\n",
        "import torch\nmodel.checkpoint = 3\nprint('checkpoint')\n",
        "import torch.distributed.checkpoint as dcp\ndcp.save(state, checkpoint_id='x')\n",
        "from mylib import checkpoint\ncheckpoint.save()\n",
    ):
        path = Path("/nonexistent/plain.py")
        assert not passes_shortcuts(linter, path, text), text


def test_a_name_after_a_comment_line_is_not_taken_for_an_import() -> None:
    """The text test alone (no parse): `checkpoint` opening a line below a comment line is
    not in an import list, so `torch.utils.checkpoint.checkpoint` cannot be reached."""
    linter = Linter(Config())
    text = ("import torch\nloader = torch.utils.data.DataLoader(d)\n"
            "# restore the saved state\ncheckpoint = torch.load(p)\n")
    assert not linter.may_hold_site(Path("/nonexistent/plain.py"), text)


TRICKY = {
    "attribute_over_lines.py": (
        "import torch\n"
        "y = (torch.utils.checkpoint  # the module\n"
        "     .  # really\n"
        "     checkpoint)(f, x, use_reentrant=False)\n"),
    "attribute_after_comment_lines.py": (
        "import torch\n"
        "y = (torch.utils.  # the module # twice\n"
        "     # a comment line\n"
        "     checkpoint.checkpoint)(f, x, use_reentrant=False)\n"),
    "backslash.py": (
        "import torch.utils.checkpoint as cp\n"
        "y = cp. \\\n    checkpoint(f, x)\n"),
    "parenthesized_import.py": (
        "from torch.utils.checkpoint import (  # comment\n"
        "    # another\n"
        "    checkpoint as ck,\n"
        ")\n"
        "y = ck(f, x)\n"),
    "parenthesized_import_crlf.py": (
        "from torch.utils import (  # the module, not # the function\r\n"
        "    # a comment line # with two marks\r\n"
        "\r\n"
        "    checkpoint as ck,  # trailing\r\n"
        ")\r\n"
        "y = ck.checkpoint(f, x)\r\n"),
    "semicolons.py": "import torch; y = torch.utils.checkpoint.checkpoint(f, x)\n",
    "conditional_import.py": (
        "try: from deepspeed.checkpointing import checkpoint\n"
        "except ImportError: from torch.utils.checkpoint import checkpoint\n"
        "def g(x):\n    return checkpoint(f, x)\n"),
    "alias_chain.py": (
        "import torch as T\n"
        "u = T.utils\n"
        "c = u.checkpoint\n"
        "run = c.checkpoint\n"
        "y = run(f, x)\n"),
    "walrus.py": (
        "from torch.utils.checkpoint import checkpoint\n"
        "if (run := checkpoint):\n    y = run(f, x)\n"),
    "partial.py": (
        "import functools\nfrom torch.utils import checkpoint as C\n"
        "ck = functools.partial(C.checkpoint, use_reentrant=False)\n"
        "y = ck(f, x)\n"),
    "self_attribute.py": (
        "from torch.utils.checkpoint import checkpoint\n"
        "class Block:\n"
        "    def __init__(self):\n        self.ckpt = checkpoint\n"
        "    def forward(self, x):\n        return self.ckpt(self.f, x)\n"),
    "import_in_function.py": (
        "def forward(x):\n"
        "    from torch.utils.checkpoint import checkpoint_sequential\n"
        "    return checkpoint_sequential(layers, 2, x)\n"),
    "layer_base.py": (
        "from transformers.modeling_layers import GradientCheckpointingLayer as Base\n"
        "class Block(Base):\n    def forward(self, x):\n        return x\n"),
    "hf_method.py": "def f(self, x):\n    return self._gradient_checkpointing_func(g, x)\n",
    "hf_enable.py": "import transformers\nmodel.gradient_checkpointing_enable()\n",
    "wrapper.py": (
        "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (\n"
        "    checkpoint_wrapper, CheckpointImpl)\n"
        "m = checkpoint_wrapper(layer, checkpoint_impl=CheckpointImpl.REENTRANT)\n"),
    "unicode.py": "from torch.utils.checkpoint import checkpoint\nπ = 3\ny = checkpoint(f, π)\n",
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_spellings_are_sites_and_pass_the_shortcuts(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(TRICKY[name], encoding="utf-8")
    linter = Linter(Config(root=tmp_path))
    assert assert_no_false_rejection(linter, path) >= 1


def test_relative_import_inside_a_package(tmp_path: Path) -> None:
    package = tmp_path / "torch" / "utils"
    package.mkdir(parents=True)
    for folder in (tmp_path / "torch", package):
        (folder / "__init__.py").write_text("")
    path = package / "user.py"
    path.write_text("from .checkpoint import checkpoint\ny = checkpoint(f, x)\n")
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(path)
    assert assert_no_false_rejection(linter, path) == 1


def test_relative_import_stands_only_for_the_file_s_own_package(tmp_path: Path) -> None:
    # `from . import x` in torch.distributed.checkpoint cannot bind `xformers` or
    # `torch.utils`: a mention of `.checkpoint` there is no reason to parse the file.
    package = tmp_path / "torch" / "distributed" / "checkpoint"
    package.mkdir(parents=True)
    for folder in (tmp_path / "torch", tmp_path / "torch" / "distributed", package):
        (folder / "__init__.py").write_text("")
    path = package / "planner.py"
    path.write_text("from . import metadata\nfrom torch.distributed.checkpoint import x\n"
                    "checkpoint = metadata.checkpoint\n")
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(path)
    assert not linter.may_hold_site(path, path.read_text())


def test_a_star_import_file_passes_only_when_it_reads_a_name_it_does_not_bind(
        tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(
        "import torch\n\ndef get_fn():\n    return torch.utils.checkpoint.checkpoint\n")
    path = package / "user.py"
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(path)
    # Every name read is bound here or a builtin: the star import cannot supply a site.
    path.write_text("from .helpers import *\nfrom .other import run\n\n"
                    "def f(x, fn=len):\n    y = run(x)\n    return fn(y) + len(x)\n")
    assert not passes_shortcuts(linter, path, path.read_text())
    # `get_fn` comes only from the star import: a helper returning the API, a site.
    path.write_text("from .helpers import *\n\ndef f(block, x):\n"
                    "    return get_fn()(block, x)\n")
    assert assert_no_false_rejection(linter, path) == 1
    # The same star import continued on the next line with a backslash.
    path.write_text("from .helpers import \\\n    *\n\ndef f(block, x):\n"
                    "    return get_fn()(block, x)\n")
    assert assert_no_false_rejection(linter, path) == 1


def test_the_api_s_own_module(tmp_path: Path) -> None:
    # Linting torch itself: inside torch/utils/checkpoint.py, `checkpoint` is the API.
    package = tmp_path / "torch" / "utils"
    package.mkdir(parents=True)
    for folder in (tmp_path / "torch", package):
        (folder / "__init__.py").write_text("")
    path = package / "checkpoint.py"
    path.write_text("def checkpoint(function, *args, **kwargs):\n    pass\n\n"
                    "def checkpoint_sequential(functions, segments, input):\n"
                    "    return checkpoint(functions[0], input)\n")
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(path)
    assert assert_no_false_rejection(linter, path) == 1


@pytest.mark.slow
@pytest.mark.skipif(TORCH is None, reason="torch is not installed")
def test_torch_tree_files_with_sites_all_pass_the_shortcuts() -> None:
    assert TORCH is not None
    linter = Linter(Config(root=TORCH.parent, select=("CKP101",)))
    total = 0
    for path in sorted(TORCH.rglob("*.py")):
        linter.project.add_root_for(path)
        try:
            text = linter.read(path)
        except SourceError:
            continue
        if not linter.prefilter.may_contain_site(text):
            continue  # the prefilter's own guarantee is tested on the fixtures above
        total += assert_no_false_rejection(linter, path, text)
    assert total >= 5  # wrap.py, checkpoint_wrapper.py, utils/checkpoint.py, tests' helpers


# -- positions ---------------------------------------------------------------------------
POSITION_SAMPLES = {
    "crlf": "import torch\r\ndef f(x):\r\n    return (x +\r\n            1)\r\n",
    "tabs_unicode": "def f(x):\n\tπ = 'é'  # ü\n\treturn π\n",
    "lone_cr": "x = 1\ry = (2,\r     3)\r",
    "decorated": ("@a.b(c)\n@d\nclass K(Base):\n    '''doc'''\n"
                  "    def m(self): return [i for i in x]\n"),
    "no_trailing_newline": "if x:\n    pass\nelse:\n    y = {1: 2}",
    "nested_definitions": (
        "class A:\n    x = 1\n\n    @dec\n    # between\n    async def m(self, y=2):\n"
        "        \"\"\"doc\"\"\"\n        def inner():  # c\n            class B: pass\n"
        "            return B\n# at column 0\n        z = inner(); w = 3\n"
        "        for i in y:\n            pass\n        else:\n            pass\n"
        "    def one_line(self): return 1\n\n\ndef f():\n\tif x:\n\t\treturn 1\n"
        "\t# trailing\n"),
    "nested_no_trailing_newline": "def f():\n    def g():\n        return 1",
}


def assert_same_positions(text: str, *, backwards: bool = False) -> None:
    """Every node's position as PositionProvider's, from the sequential pass and from passes
    anchored at CPython's rows; asked in its order or (`backwards`) last node first (the
    sequential pass then runs to the end at once)."""
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    items = list(expected.items())
    anchored = Positions(module, text, statement_starts(ast.parse(text)))
    for positions in Positions(module), anchored:
        for node, code_range in reversed(items) if backwards else items:
            assert positions.range(node) == (
                (code_range.start.line, code_range.start.column),
                (code_range.end.line, code_range.end.column)), (type(node).__name__, text)
    # CPython's rows were libcst's (no fallback to the whole pass), except where libcst
    # numbers lines otherwise
    assert anchored.anchored or LONE_CONTINUATION.search(text)


@pytest.mark.parametrize("name", sorted(POSITION_SAMPLES))
def test_positions_match_position_provider(name: str) -> None:
    assert_same_positions(POSITION_SAMPLES[name])
    assert_same_positions(POSITION_SAMPLES[name], backwards=True)


@pytest.mark.parametrize("path", python_files(FIXTURES)[:40],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_positions_match_position_provider_on_fixtures(path: Path) -> None:
    assert_same_positions(path.read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.skipif(TORCH is None, reason="torch is not installed")
def test_positions_match_position_provider_on_torch_files() -> None:
    assert TORCH is not None
    for relative in ("utils/checkpoint.py", "_higher_order_ops/wrap.py", "nn/modules/module.py"):
        assert_same_positions((TORCH / relative).read_text(encoding="utf-8"))


def assert_definition_rows(text: str) -> int:
    """A `def`'s row read from CPython's rows is its first decorator's (or its own) as
    PositionProvider gives it; returns how many were read so."""
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    anchored = Positions(module, text, statement_starts(ast.parse(text)))
    answered = 0
    for node in expected:
        if isinstance(node, cst.FunctionDef):
            row = anchored.definition_row(node)
            first = node.decorators[0] if node.decorators else node
            assert row is None or row == expected[first].start.line, text
            answered += row is not None
    return answered


def test_definition_rows_of_functions_and_methods_need_no_pass() -> None:
    # m, inner, one_line, f: in a class's, a function's or the module's body
    assert assert_definition_rows(POSITION_SAMPLES["nested_definitions"]) == 4


def test_definition_rows_without_a_pass() -> None:
    answered = sum(assert_definition_rows(text) for text in POSITION_SAMPLES.values())
    answered += sum(assert_definition_rows(path.read_text(encoding="utf-8"))
                    for path in python_files(FIXTURES)[:40])
    assert answered > 30


HAND_ROLLED_CLASS = (
    "import torch\n\n\n"
    "class CheckpointFunction(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, run_function, *args):\n"
    "        ctx.run_function = run_function\n"
    "        ctx.save_for_backward(*args)\n"
    "        with torch.no_grad():\n"
    "            return run_function(*args)\n\n"
    "    @staticmethod\n"
    "    def backward(ctx, *grads):\n"
    "        inputs = [x.detach().requires_grad_(True) for x in ctx.saved_tensors]\n"
    "        with torch.enable_grad():\n"
    "            outputs = ctx.run_function(*inputs)\n"
    "        torch.autograd.backward(outputs, grads)\n"
    "        return (None,) + tuple(x.grad for x in inputs)\n")
ORDINARY_FUNCTION = (
    "import torch\n\n\n"
    "class CheckpointFunction(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, fn, x):\n"
    "        return fn(x)\n\n"
    "    @staticmethod\n"
    "    def backward(ctx, grad):\n"
    "        return None, grad\n")
APPLYING = ("from pkg.function import CheckpointFunction\n\n\n"
            "def forward(block, x):\n"
            "    return CheckpointFunction.apply(block, x)\n")
SUBCLASS = ("from pkg.function import CheckpointFunction\n\n\n"
            "class Diffusion(CheckpointFunction):\n"
            "    pass\n")
APPLYING_SUBCLASS = ("from pkg.variants import Diffusion\n\n\n"
                     "def forward(block, x):\n"
                     "    return Diffusion.apply(block, x)\n")


def applying_project(tmp_path: Path, function_source: str) -> tuple[Linter, list[Path]]:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "function.py").write_text(function_source)
    (package / "variants.py").write_text(SUBCLASS)
    users = [package / "user.py", package / "subclass_user.py"]
    users[0].write_text(APPLYING)
    users[1].write_text(APPLYING_SUBCLASS)
    linter = Linter(Config(root=tmp_path))
    for user in users:
        linter.project.add_root_for(user)
    return linter, users


def test_apply_of_a_hand_rolled_class_of_another_file_passes_the_shortcuts(
        tmp_path: Path) -> None:
    """Nothing in the file names a checkpoint API: the project's classes (a whole-project
    fact) pass it, for the class itself and for a subclass of it, imported from other
    files."""
    linter, users = applying_project(tmp_path, HAND_ROLLED_CLASS)
    for user in users:
        name = linter.project.module_name(user)[0]
        assert not linter.confirmer.may_hold_site_text(user.read_text(), name)
        assert assert_no_false_rejection(linter, user) == 1


def test_apply_of_an_ordinary_function_of_another_file_is_rejected(tmp_path: Path) -> None:
    """The same calls on an autograd Function that reruns nothing: no site, and the text
    test rejects the files (its file lacks the words a hand-written checkpoint needs)."""
    linter, users = applying_project(tmp_path, ORDINARY_FUNCTION)
    for user in users:
        assert site_count(linter, user, user.read_text()) == 0
        assert not linter.may_hold_site(user, user.read_text())
