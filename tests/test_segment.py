"""Segments (target body + project callees, with chains), the binding model and the tensor
inference behind CKP2xx-4xx."""

from __future__ import annotations

import functools
import os
import textwrap
from pathlib import Path

import libcst as cst

from ckptlint.analysis.project import Project
from ckptlint.analysis.resolve import ClassInfo, Resolver
from ckptlint.config import Config, parse_table
from ckptlint.engine.linter import Linter
from ckptlint.engine.run import lint
from ckptlint.syntax.source import SourceModule, parse_text

FIXTURES = Path(__file__).parent / "fixtures"
CHAIN_PROJECT = FIXTURES / "projects" / "segment_chain"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def run(root: Path, paths: list[str] | None = None, **table):
    config = parse_table({"select": ["CKP2", "CKP3", "CKP4"], **table}, root / "pyproject.toml")
    return lint(paths or [str(root)], config).findings


def relative(path: Path) -> str:
    return os.path.relpath(path, Path.cwd())


# -- the segment ---------------------------------------------------------------------------------
def test_hazard_two_calls_deep_in_another_file_has_the_chain():
    findings = run(CHAIN_PROJECT, [relative(CHAIN_PROJECT)])
    by_code = {(Path(f.filename).name, f.code): f for f in findings}
    read = by_code[("helpers.py", "CKP201")]
    assert read.chain == ("Block.forward", "Attention.forward", "helpers.scaled_scores")
    assert Path(read.site.filename).name == "model.py" and read.site.row == 15
    assert "train.py:10" in read.message and "settings.SCALE" in read.message
    assert read.target is not None and read.target.qualname == "Block.forward"


def test_hazard_outside_the_linted_files_is_reported_at_the_site():
    model = relative(CHAIN_PROJECT / "model.py")
    findings = run(CHAIN_PROJECT, [model])
    assert findings, "segment findings in helpers.py should be relocated to model.py"
    assert {Path(f.filename).name for f in findings} == {"model.py"}
    assert all(f.start.row == 15 for f in findings)
    assert any("helpers.py:12" in f.message for f in findings)


def test_a_hazard_in_a_linted_file_spelled_otherwise_keeps_that_file_s_name():
    """Given absolute paths, a finding in a module reached through an import (named
    relative to the current folder, as the project names it) takes the name the file was
    linted under."""
    absolute = CHAIN_PROJECT.resolve()
    findings = run(CHAIN_PROJECT, [str(absolute)])
    linted = {str(path) for path in absolute.rglob("*.py")}
    assert findings and {f.filename for f in findings} <= linted
    assert any(Path(f.filename).name == "helpers.py" and f.code == "CKP201" for f in findings)


def test_max_depth_limits_the_callees_followed():
    findings = run(CHAIN_PROJECT, [relative(CHAIN_PROJECT)], **{"max-depth": 1})
    assert not [f for f in findings if Path(f.filename).name == "helpers.py"]
    findings = run(CHAIN_PROJECT, [relative(CHAIN_PROJECT)], **{"max-depth": 2})
    assert [f for f in findings if Path(f.filename).name == "helpers.py"]


def test_recursion_ends_and_each_hazard_is_reported_once(tmp_path):
    write(tmp_path, {"m.py": """
        from torch.utils.checkpoint import checkpoint

        LOG = []


        def ping(x, n):
            LOG.append(n)
            return pong(x, n - 1) if n else x


        def pong(x, n):
            print(n)
            return ping(x, n)


        def forward(x):
            a = checkpoint(ping, x, 3, use_reentrant=False)
            return checkpoint(pong, a, 3, use_reentrant=False)
    """})
    findings = run(tmp_path)
    rows = sorted((f.start.row, f.code) for f in findings)
    assert rows == [(8, "CKP401"), (13, "CKP401")]
    print_finding = [f for f in findings if f.start.row == 13][0]
    assert print_finding.chain == ("m.ping", "m.pong")  # the first site in output order


def test_never_checkpointed_code_is_not_flagged(tmp_path):
    write(tmp_path, {"m.py": """
        import random
        import torch

        STATE = []


        def helper(x):
            STATE.append(x)
            print(random.random())
            if torch.isnan(x).any():
                x = x.to("cuda")
            return x
    """})
    assert run(tmp_path) == []


def test_object_built_in_the_segment_owns_its_attributes(tmp_path):
    # torch/_higher_order_ops/wrap.py: checkpoint(Interpreter(gm).run, ...)
    write(tmp_path, {"m.py": """
        from torch.utils.checkpoint import checkpoint


        class Interpreter:
            def __init__(self, gm):
                self.gm = gm
                self.env = {}

            def run(self, x):
                self.env = {}
                self.env["x"] = x
                return self.step(x)

            def step(self, x):
                self.last = x
                return self.env["x"] * 2


        def forward(gm, x):
            return checkpoint(Interpreter(gm).run, x, use_reentrant=False)
    """})
    assert run(tmp_path) == []


def test_files_without_sites_are_parsed_only_when_a_segment_reaches_them(tmp_path):
    write(tmp_path, {
        "model.py": """
            from torch.utils.checkpoint import checkpoint
            import helpers
            import settings


            def block(x):
                return helpers.scale(x) * settings.FACTOR


            def forward(x):
                return checkpoint(block, x, use_reentrant=False)
        """,
        "helpers.py": """
            def scale(x):
                return x * 2
        """,
        "settings.py": "FACTOR = 3\n",
        "unrelated.py": "def other():\n    return 1\n",
        "also_unrelated.py": "import settings\n\nprint(settings.__name__)\n",
    })
    config = parse_table({"select": ["CKP2", "CKP3", "CKP4"]}, tmp_path / "pyproject.toml")
    linter = Linter(config)
    model = tmp_path / "model.py"
    linter.project.add_root_for(model)
    result = linter.lint_file(model, str(model))
    assert result.findings == []
    parsed = {path.name for path, module in linter.project._by_path.items() if module is not None}
    assert "helpers.py" in parsed and "settings.py" in parsed
    assert "unrelated.py" not in parsed and "also_unrelated.py" not in parsed


def test_a_file_reached_before_its_own_analysis_is_not_parsed_again(tmp_path, monkeypatch):
    """`b.py` holds a site and is reached by `a.py`'s segment first: its analysis uses the
    module kept from then (one parse), with the findings of a fresh parse."""
    import ckptlint.syntax.source as source

    write(tmp_path, {
        "a.py": """
            from torch.utils.checkpoint import checkpoint
            import b


            def block(x):
                return b.helper(x)


            def forward(x):
                return checkpoint(block, x)
        """,
        "b.py": """
            from torch.utils.checkpoint import checkpoint


            def helper(x):
                return x * 2


            def forward(x):
                return checkpoint(helper, x)
        """,
    })
    fresh = lint([str(tmp_path / "b.py")], Config(root=tmp_path), use_cache=False, jobs=1)
    parsed: list[str] = []
    original = source.parse_text
    monkeypatch.setattr(source, "parse_text", lambda text, display, **kwargs: (
        parsed.append(Path(display).name), original(text, display, **kwargs))[1])
    linter = Linter(Config(root=tmp_path))
    linter.project.add_root_for(tmp_path / "a.py")
    first = linter.lint_file(tmp_path / "a.py", str(tmp_path / "a.py"))
    assert [f.code for f in first.findings] == ["CKP102"] and parsed == ["a.py", "b.py"]
    reached = linter.lint_file(tmp_path / "b.py", str(tmp_path / "b.py"))
    assert parsed == ["a.py", "b.py"]
    assert [f.to_json() for f in reached.findings] == [f.to_json() for f in fresh.findings]
    assert [f.code for f in reached.findings] == ["CKP102"]


# -- the binding model -----------------------------------------------------------------------------
def module_of(project: Project, root: Path, name: str) -> SourceModule:
    module = project.find_module(name)
    assert module is not None
    return module


def test_binding_model_module_globals(tmp_path):
    from ckptlint.analysis.bindings import BindingModel

    write(tmp_path, {
        "settings.py": """
            SCALE = 1.0
            SCALE = 2.0  # module level: import time, not a change
            LIMIT = 3
            TABLE = {}
            TABLE["a"] = 1  # import time too
            HISTORY = []
            COUNT = 0


            def bump():
                global COUNT
                COUNT += 1


            def shadow():
                LIMIT = 4  # a local, not the global
                return LIMIT
        """,
        "train.py": """
            import settings as cfg
            from settings import HISTORY


            def schedule(step):
                cfg.SCALE = 1.0 / step
                HISTORY.append(step)
        """,
    })
    project = Project([tmp_path])
    model = BindingModel(project, Resolver(project))
    settings = module_of(project, tmp_path, "settings")
    scale = model.global_changes(settings, "SCALE")
    assert [(c.how, Path(c.module.display).name, c.where) for c in scale] == [
        ("rebound", "train.py", "schedule")]
    assert model.global_changes(settings, "LIMIT") == []
    assert model.global_changes(settings, "TABLE") == []
    assert [c.how for c in model.global_changes(settings, "COUNT")] == [
        "changed by augmented assignment"]
    history = model.global_changes(settings, "HISTORY", rebinding_counts=False)
    assert [c.how for c in history] == ["mutated in place"]
    # A reader that did `from settings import SCALE` keeps its copy: rebinding is not a change.
    assert model.global_changes(settings, "SCALE", rebinding_counts=False) == []


def test_binding_model_instance_attributes(tmp_path):
    from ckptlint.analysis.bindings import BindingModel

    write(tmp_path, {"layers.py": """
        class Base:
            def reset(self):
                self.cache = None


        class Layer(Base):
            def __init__(self, dim):
                self.dim = dim
                self.cache = None
                self.stats = []
                self._build()

            def _build(self):
                self.proj = dim_proj(self.dim)

            def reset_parameters(self):
                self.scale = 1.0

            def forward(self, x):
                self.stats.append(x)
                self.buf.add_(x)
                return x * self.dim
    """})
    project = Project([tmp_path])
    resolver = Resolver(project)
    module = module_of(project, tmp_path, "layers")
    scope = module.scopes.module_scope
    node = scope.bindings["Layer"][0].node
    cls = ClassInfo(module, node, module.scopes.scope_of[id(node)])
    changes = BindingModel(project, resolver).class_changes(cls)
    assert set(changes) == {"cache", "stats", "buf"}
    assert changes["cache"][0].where == "Base.reset"
    assert changes["stats"][0].how == "mutated in place"


# -- tensor inference ------------------------------------------------------------------------------
def levels(source: str) -> dict[str, int]:
    """The level of every `probe_<name> = <expr>` value in function `f` of `source`."""
    from ckptlint.analysis.resolve import FunctionValue
    from ckptlint.analysis.tensors import TensorInference

    text = textwrap.dedent(source)
    module = SourceModule(Path("t.py"), "t.py", "t", False, text, parse_text(text, "t.py"))
    node = module.scopes.module_scope.bindings["f"][0].node
    scope = module.scopes.scope_of[id(node)]
    function = FunctionValue(module, node, scope)
    inference = TensorInference(Resolver(Project([])), module, scope, node)
    found = {}
    for statement in node.body.body:
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign):
            target = small.targets[0].target
            if isinstance(target, cst.Name) and target.value.startswith("probe_"):
                found[target.value[6:]] = inference.level(small.value, function.scope)
    return found


def test_tensor_inference_levels():
    from ckptlint.analysis.tensors import NONE, STRONG, WEAK

    found = levels("""
        import torch
        import torch.nn.functional as F


        def f(x, mask=None, step: int = 0, scale=1.0):
            h = F.relu(x)
            n = h.shape[0]
            probe_param = x > 0
            probe_step = step > 10
            probe_scale = scale
            probe_shape = h.shape[-1] != x.shape[-1]
            probe_dim = x.dim() == 3 and h.size(0) > 1
            probe_none = mask is None
            probe_isinstance = isinstance(mask, torch.Tensor) and len(mask) > 0
            probe_dtype = h.dtype == torch.float16
            probe_torch_op = h > 0
            probe_isinf = torch.isinf(h).any()
            probe_item = x.sum().item() > 1
            probe_bool = bool(h.mean() > 0)
            probe_n = n > 1
            probe_finfo = torch.finfo(h.dtype).max
            probe_grad = torch.is_grad_enabled()
    """)
    assert found == {
        "param": WEAK, "step": NONE, "scale": NONE, "shape": NONE, "dim": NONE, "none": NONE,
        "isinstance": NONE, "dtype": NONE, "torch_op": STRONG, "isinf": STRONG,
        "item": STRONG, "bool": STRONG, "n": NONE, "finfo": NONE, "grad": NONE,
    }


def test_branch_and_assert_on_tensor_values_are_worded_for_what_the_replay_does(tmp_path):
    write(tmp_path, {"m.py": """
        import torch
        from torch.utils.checkpoint import checkpoint


        def block(h):
            if torch.isinf(h).any():
                h = torch.clamp(h, -1e4, 1e4)
            assert torch.isfinite(h).all()
            return h


        def forward(x):
            return checkpoint(block, x, use_reentrant=False)
    """})
    branch, asserted = sorted(run(tmp_path), key=lambda f: f.start.row)
    assert (branch.code, branch.data["branch"]) == ("CKP203", "if")
    assert "the replay takes the same path only if" in branch.message
    assert (asserted.code, asserted.data["branch"]) == ("CKP203", "assert")
    assert "raise AssertionError" in asserted.message
    assert "same path" not in asserted.message


def test_changing_one_attribute_of_a_global_object_concerns_that_attribute_only(tmp_path):
    write(tmp_path, {"m.py": """
        from torch.utils.checkpoint import checkpoint


        class Settings:
            hidden = 4
            lr = 0.1


        CFG = Settings()


        def on_step(step):
            CFG.lr = 0.1 / step


        def block(x):
            y = x * CFG.hidden
            return y + CFG.lr


        def forward(x):
            return checkpoint(block, x, use_reentrant=False)
    """})
    findings = run(tmp_path)
    assert [(f.start.row, f.code) for f in findings] == [(19, "CKP201")]
    assert "`CFG.lr`" in findings[0].message and "m.py:14" in findings[0].message


def test_segment_findings_carry_site_chain_and_target_in_json(tmp_path):
    write(tmp_path, {"m.py": """
        import torch
        from torch.utils.checkpoint import checkpoint


        def inner(x):
            print(x.shape)
            return x


        def outer(x):
            return inner(x) * 2


        def forward(x):
            return checkpoint(outer, x, use_reentrant=False)
    """})
    [finding] = run(tmp_path)
    data = finding.to_json()
    assert data["code"] == "CKP401" and data["location"]["row"] == 7
    assert data["site"]["row"] == 16
    assert data["chain"] == ["m.outer", "m.inner"]
    assert data["target"]["qualname"] == "outer"


def test_a_from_imported_global_is_changed_only_where_a_file_writes_under_it(
        tmp_path: Path) -> None:
    """`from cfg import TABLE` then `TABLE[k] *= 2` changes cfg.TABLE; a file that only reads
    TABLE is not parsed to look (the text shows no write under the name)."""
    (tmp_path / "cfg.py").write_text('TABLE = {"scale": 1.0}\n')
    (tmp_path / "tweak.py").write_text(
        'from cfg import TABLE\n\n\ndef bump():\n    TABLE["scale"] *= 2\n')
    (tmp_path / "reader.py").write_text(
        'from cfg import TABLE\n\n\ndef show():\n    return TABLE.get("scale"), TABLE["scale"]\n')
    model = tmp_path / "model.py"
    model.write_text(
        "import cfg\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
        'def block(x):\n    return x * cfg.TABLE["scale"]\n\n\n'
        "def run(x):\n    return checkpoint(block, x, use_reentrant=False)\n")
    linter = Linter(Config(root=tmp_path, select=("CKP201",)))
    result = linter.lint_file(model, "model.py")
    [finding] = result.findings
    assert [(Path(change["filename"]).name, change["row"]) for change in finding.data["changes"]] \
        == [("tweak.py", 5)]
    assert not any(path.endswith("reader.py") for path in result.dependencies)


def test_a_script_changing_a_global_between_checkpoint_and_backward_names_that_change(
        tmp_path):
    # A script whose forward is the checkpoint call itself: the window runs from that call to
    # the backward, so the global's first assignment (import time) is not a change, the one
    # between them is.
    write(tmp_path, {"script.py": """
        import torch
        from torch.utils.checkpoint import checkpoint

        COMPUTE_DTYPE = torch.bfloat16


        def block(x):
            return torch.sin(x.to(COMPUTE_DTYPE))


        x = torch.randn(4, 8, requires_grad=True)
        out = checkpoint(block, x, use_reentrant=False)
        COMPUTE_DTYPE = torch.float32
        out.float().sum().backward()
    """})
    [finding] = run(tmp_path)
    assert finding.code == "CKP201"
    assert [(c["row"], c["phase"], c["because"]) for c in finding.data["changes"]] == [
        (14, "step", "training")]


def test_a_confined_override_search_parses_only_subclass_files_importing_from_inside(tmp_path):
    """Resolving inside framework code is confined to one module: a subclass elsewhere
    counts only through an import of a name inside that module, so a file without one is
    not parsed (CPython's `ast` reads its imports) and the answer is the same."""
    write(tmp_path, {
        "torch/__init__.py": "", "torch/fx/__init__.py": "from .interpreter import Interpreter\n",
        "torch/fx/interpreter.py": "class Interpreter:\n    def run(self):\n"
                                   "        return self.run_node()\n",
        "torch/elsewhere.py": "import torch.fx.interpreter\nfrom torch.fx import Interpreter\n"
                              "class ByPackage(Interpreter):\n    def run_node(self): ...\n",
        "torch/direct.py": "from torch.fx.interpreter import Interpreter\n"
                           "class Direct(Interpreter):\n    def run_node(self): ...\n"})
    project = Project([tmp_path])
    resolver = Resolver(project)
    module = module_of(project, tmp_path, "torch.fx.interpreter")
    [cls] = [ClassInfo(module, scope.node, scope) for scope in module.scopes.scope_of.values()
             if isinstance(scope.node, cst.ClassDef)]
    with resolver.confined_to(module):
        found = resolver.self_attribute(cls, "run_node", 0)
    assert [value.owner.node.name.value for value in found] == ["Direct"]
    parsed = {path.name for path, parsed in project._by_path.items() if parsed is not None}
    assert "direct.py" in parsed and "elsewhere.py" not in parsed


@functools.cache
def parsed_sources() -> tuple[SourceModule, ...]:
    """Every fixture and ckptlint's own source, parsed (those libcst parses)."""
    import ckptlint
    from ckptlint.syntax.reading import SourceError

    sources = [*FIXTURES.rglob("*.py"), *Path(ckptlint.__file__).parent.rglob("*.py")]
    modules = []
    for path in sorted(sources):
        text = path.read_text(encoding="utf-8")
        try:
            modules.append(SourceModule(path, path.name, path.stem, False, text,
                                        parse_text(text, path.name)))
        except SourceError:  # a fixture of a syntax error
            continue
    return tuple(modules)


def test_the_decorator_names_read_from_the_scopes_are_those_of_a_walk_of_the_tree():
    """`names_used_as_decorators` reads the definitions the scopes hold instead of walking
    the whole tree: the same names, for every fixture and for ckptlint's own source."""
    from ckptlint.analysis.bindings import names_used_as_decorators
    from ckptlint.syntax.walk import Visitor

    class EveryDecorator(Visitor):
        def __init__(self) -> None:
            self.names: set[str] = set()

        def visit_Decorator(self, node: cst.Decorator) -> None:
            expr = node.decorator.func if isinstance(node.decorator, cst.Call) else node.decorator
            if isinstance(expr, (cst.Name, cst.Attribute)):
                self.names.add(expr.value if isinstance(expr, cst.Name) else expr.attr.value)

    compared = 0
    for module in parsed_sources():
        walked = EveryDecorator()
        walked.walk(module.tree)
        assert names_used_as_decorators(module) == walked.names, module.path
        compared += bool(walked.names)
    assert compared > 20


def test_whether_a_value_reads_its_target_is_what_comparing_every_expression_says():
    """`reads_target` compacts only the expressions whose last name the target holds: the
    same answer as comparing every name and attribute chain of the value, for every
    assignment of the fixtures and of ckptlint's own source."""
    from ckptlint.analysis.segment import compact, expressions_in, reads_target
    from ckptlint.syntax.walk import Visitor

    class Assignments(Visitor):
        def __init__(self) -> None:
            self.pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []

        def visit_Assign(self, node: cst.Assign) -> None:
            self.pairs += [(node.value, target.target) for target in node.targets]

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self.pairs.append((node.value, node.target))

    reading = 0
    for module in parsed_sources():
        found = Assignments()
        found.walk(module.tree)
        for value, target in found.pairs:
            every = any(compact(expr) == compact(target) for expr in expressions_in(value))
            assert reads_target(value, target) == every, module.code(target)
            reading += every
    assert reading > 50


def test_compact_reads_name_and_attribute_chains_as_their_code_without_whitespace():
    """`compact` spells plain chains without generating code: the same text as the code."""
    from ckptlint.analysis.segment import chain_code, compact
    from ckptlint.syntax.walk import iter_children

    sources = [*sorted((Path(__file__).parent / "fixtures").glob("*.py")),
               Path(cst.__file__).parent / "_nodes" / "expression.py"]
    spelled = 0
    for path in sources:
        pending: list[cst.CSTNode] = [parse_text(path.read_text(), path.name)]
        while pending:
            node = pending.pop()
            pending.extend(iter_children(node))
            if isinstance(node, (cst.Name, cst.Attribute)):
                code = "".join(cst.Module([]).code_for_node(node).split())
                assert compact(node) == code, (path.name, code)
                spelled += chain_code(node) is not None
    assert spelled > 1000
    parenthesized = cst.parse_expression("(a).b")
    assert chain_code(parenthesized) is None and compact(parenthesized) == "(a).b"
