"""The base of the segment rules (CKP2xx-4xx): segments built once per site, shared state.

`SegmentRule.check_sites` builds (or takes from `context.cache`) the segment of every site
in a linted file and calls `check(segment)`. Segments, the binding model and the tensor
inference are shared by all segment rules through the per-run cache.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

import libcst as cst

from ckptlint.analysis.bindings import BindingModel, Change
from ckptlint.findings import Finding
from ckptlint.analysis.resolve import ClassInfo
from ckptlint.checks.base import Rule
from ckptlint.checks.state_facts import StateRead, qualified, source_text
from ckptlint.analysis.scopes import Scope
from ckptlint.analysis.segment import (FunctionFacts, Reached, Segment, SegmentBuilder, import_qualnames,
                              is_framework, iter_segment, top_package)
from ckptlint.analysis.tensors import TensorInference


class SegmentRule(Rule):
    """A rule about what runs inside checkpointed code (reported at the hazard)."""

    def check_sites(self, sites) -> Iterable[Finding]:
        for site in sites:
            if not site.is_segment or not site.targets:
                continue
            segment = self.segment(site)
            try:
                yield from self.check(segment)
            except RecursionError:
                continue

    def check(self, segment: Segment) -> Iterator[Finding]:
        raise NotImplementedError

    # -- shared, per run ---------------------------------------------------------------
    @property
    def builder(self) -> SegmentBuilder:
        cache = self.context.cache
        if "segment-builder" not in cache:
            cache["segment-builder"] = SegmentBuilder(self.context.resolver,
                                                      self.context.config.max_depth)
        return cache["segment-builder"]

    @property
    def bindings(self) -> BindingModel:
        cache = self.context.cache
        if "binding-model" not in cache:
            cache["binding-model"] = BindingModel(self.context.project, self.context.resolver)
        return cache["binding-model"]

    def segment(self, site) -> Segment:
        segments = self.context.cache.setdefault("segments", {})
        key = id(site)
        if key not in segments:
            segments[key] = (site, self.builder.build(site))
        segment = segments[key][1]
        self.touch(reached.module for reached in segment.functions)
        return segment

    def touch(self, modules) -> None:
        """Tell the engine's cache which files this file's findings depend on (cached
        answers do not go through `Project.module_at`, which records them otherwise)."""
        accessed = getattr(self.context.project, "accessed", None)
        if accessed is None:
            return
        for module in modules:
            accessed.add(module.path)

    def tensors(self, reached: Reached) -> TensorInference:
        inferences = self.context.cache.setdefault("tensor-inference", {})
        key = id(reached.node)
        if key not in inferences:
            inferences[key] = TensorInference(self.context.resolver, reached.module,
                                              reached.scope, reached.node,
                                              reached.function.owner)
        return inferences[key]

    def functions(self, segment: Segment) -> Iterator[tuple[Reached, FunctionFacts]]:
        return iter_segment(segment)

    def at(self, segment: Segment, reached: Reached, node: cst.CSTNode,
           data: Mapping[str, Any]) -> Finding:
        return self.finding(reached.module, node, data, site=segment.site,
                            chain=reached.chain)

    # -- classes and state -------------------------------------------------------------
    def self_class(self, reached: Reached, expr: cst.BaseExpression,
                   scope: Scope) -> ClassInfo | None:
        cls = self.context.resolver.self_class(expr, reached.module, scope)
        if cls is None:
            return None
        return reached.function.owner or cls

    def changed_state_reads(self, reached: Reached, facts: FunctionFacts, *,
                            in_condition: bool) -> Iterator[tuple]:
        """(load, the state read) for reads of mutable state, once per row and state: those
        in branch conditions (CKP204) or the others (CKP201)."""
        seen: set[tuple[int, str]] = set()
        for load in facts.loads:
            if bool(load.in_condition) != in_condition:
                continue
            read = self.state_changes(reached, load.node, load.scope, load.attr)
            if read is None:
                continue
            row = reached.module.start(load.node).row
            if (row, read.state) not in seen:
                seen.add((row, read.state))
                yield load, read

    def state_changes(self, reached: Reached, node: cst.CSTNode, scope: Scope,
                      attr: str | None = None) -> StateRead | None:
        """The state `node` reads and where it changes, when that state is mutable.

        `attr`: the name is read as `name.attr`; changes of other attributes do not count.
        """
        if isinstance(node, cst.Name):
            read = self.global_state(reached, node, scope)
            if read is None or attr is None:
                return read
            changes = [c for c in read.changes if c.part is None or c.part == attr]
            return (StateRead(f"{read.state}.{attr}", read.owner, read.attribute, changes)
                    if changes else None)
        if isinstance(node, cst.Attribute):
            attr = node.attr.value
            cls = self.self_class(reached, node.value, scope)
            if cls is not None:
                if attr == "training" or reached.fresh_self:
                    return None
                if self.context.resolver.find_method(cls, attr) is not None:
                    return None
                changes = self.bindings.class_changes(cls).get(attr)
                if changes and not self.written_first(reached, node, attr):
                    self.touch(change.module for change in changes)
                    return StateRead(f"self.{attr}", qualified(cls.module, cls.qualname), attr,
                                     changes)
                return None
            owner = self.class_of_name(node.value, scope, reached.module)
            if owner is not None:
                if self.context.resolver.find_method(owner, attr) is not None:
                    return None
                changes = self.bindings.class_changes(owner).get(attr)
                if changes:
                    self.touch(change.module for change in changes)
                    return StateRead(f"{owner.node.name.value}.{attr}",
                                     qualified(owner.module, owner.qualname), attr, changes)
                return None
            if is_framework(top_package(reached.module)):
                return None  # a framework's own settings, read by its own code
            module = self.project_module(node.value, scope)
            if module is not None:
                if not self.is_assigned_global(module, attr):
                    return None
                changes = self.bindings.global_changes(module, attr)
                if changes:
                    self.touch(change.module for change in changes)
                    return StateRead(f"{source_text(reached.module, node.value)}.{attr}",
                                     qualified(module), attr, changes)
        return None

    @staticmethod
    def class_of_name(expr: cst.BaseExpression, scope: Scope, module) -> ClassInfo | None:
        """The class of this file a bare name denotes (`Layer` in `Layer.scale`)."""
        if not isinstance(expr, cst.Name):
            return None
        bindings = scope.lookup(expr.value)
        if len(bindings) != 1 or bindings[0].kind != "class":
            return None
        node = bindings[0].node
        class_scope = module.scopes.scope_of.get(id(node))
        if class_scope is None:
            return None
        return ClassInfo(module, node, class_scope)

    def written_first(self, reached: Reached, read: cst.CSTNode, attr: str) -> bool:
        """`self.X = ...` as a plain statement of this function, above the read: every run
        (the replay too) sets it before reading it, so the read sees this run's value."""
        node = reached.node
        if not isinstance(node, cst.FunctionDef) or not isinstance(node.body, cst.IndentedBlock):
            return False
        rows = self.context.cache.setdefault("first-writes", {})
        key = (id(node), attr)
        if key not in rows:
            rows[key] = None
            for statement in node.body.body:
                if not isinstance(statement, cst.SimpleStatementLine):
                    continue
                for small in statement.body:
                    targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                               else [small.target] if isinstance(small, cst.AnnAssign)
                               and small.value is not None else [])
                    if any(isinstance(t, cst.Attribute) and t.attr.value == attr
                           and isinstance(t.value, cst.Name)
                           and self.self_class(reached, t.value, reached.scope) is not None
                           for t in targets):
                        rows[key] = reached.module.start(statement).row
                        break
                if rows[key] is not None:
                    break
        first = rows[key]
        return first is not None and first < reached.module.start(read).row

    def project_module(self, expr: cst.BaseExpression, scope: Scope):
        for qualname in import_qualnames(expr, scope):
            if is_framework(qualname) or qualname.startswith("builtins."):
                continue
            module = self.context.project.find_module(qualname)
            if module is not None:
                return module
        return None

    @staticmethod
    def is_assigned_global(module, name: str) -> bool:
        bindings = module.scopes.module_scope.bindings.get(name, [])
        if not bindings:
            return False
        return not any(b.kind in ("def", "class", "import") for b in bindings)

    def global_state(self, reached: Reached, node: cst.Name, scope: Scope) -> StateRead | None:
        name = node.value
        bindings = scope.lookup(name)
        if not bindings or bindings[0].scope.kind != "module":
            return None
        module = reached.module
        if any(b.kind in ("def", "class") for b in bindings):
            return None
        imports = [b for b in bindings if b.kind == "import"]
        changes: list[Change] = []
        owner, attribute = qualified(module), name
        if imports:
            for binding in imports:
                qualname = binding.qualname or ""
                if is_framework(qualname) or "." not in qualname:
                    continue
                project = self.context.project
                if project.module_path(qualname) is not None:
                    continue  # a module, not a value
                parent_name, attr = qualname.rsplit(".", 1)
                parent_path = project.module_path(parent_name)
                if parent_path is None or not project.may_bind(parent_path, attr):
                    continue
                parent = project.module_at(parent_path)
                if parent is None or not self.is_assigned_global(parent, attr):
                    continue
                found = self.bindings.global_changes(parent, attr, rebinding_counts=False)
                if found and not changes:
                    owner, attribute = qualified(parent), attr
                changes += found
            changes += self.bindings.module_writes(module).own.get(name, [])
        elif is_framework(top_package(module)):
            # Linting a framework itself (torch): only its own module rebinds its globals.
            changes = list(self.bindings.module_writes(module).own.get(name, []))
        else:
            changes = self.bindings.global_changes(module, name)
        if not changes:
            return None
        self.touch(change.module for change in changes)
        return StateRead(name, owner, attribute, changes)
