"""The base of the segment rules (CKP2xx-4xx), and what several of them ask about state.

The engine builds the segment of every site of a linted file once and calls each segment
rule's `check(segment)`; the binding model, the tensor inference and a memo for answers
kept between calls are in the rule's context (`ckptlint.checks.context`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import libcst as cst

from ckptlint.analysis.bindings import Change
from ckptlint.analysis.resolve import ClassInfo
from ckptlint.analysis.scopes import BindingKind, Scope, ScopeKind
from ckptlint.analysis.segment import (
    FunctionFacts,
    Reached,
    Segment,
    import_qualnames,
    is_framework,
    iter_segment,
    top_package,
)
from ckptlint.checks.base import Rule
from ckptlint.checks.state_facts import StateRead, qualified, source_text
from ckptlint.findings import Finding


class SegmentRule(Rule):
    """A rule about what runs inside checkpointed code (reported at the hazard).

    `check` is called once per segment (a site whose targets resolved); whatever it keeps
    between calls goes in `self.context.memo`, never on the rule.
    """

    def check(self, segment: Segment) -> Iterator[Finding]:
        raise NotImplementedError

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
                changes = self.context.bindings.attribute_changes(cls, attr)
                if changes and not self.written_first(reached, node, attr):
                    return StateRead(f"self.{attr}", qualified(cls.module, cls.qualname), attr,
                                     changes)
                return None
            owner = self.class_of_name(node.value, scope, reached.module)
            if owner is not None:
                if self.context.resolver.find_method(owner, attr) is not None:
                    return None
                changes = self.context.bindings.attribute_changes(owner, attr)
                if changes:
                    return StateRead(f"{owner.node.name.value}.{attr}",
                                     qualified(owner.module, owner.qualname), attr, changes)
                return None
            if is_framework(top_package(reached.module)):
                return None  # a framework's own settings, read by its own code
            module = self.project_module(node.value, scope)
            if module is not None:
                if not self.is_assigned_global(module, attr):
                    return None
                changes = self.context.bindings.global_changes(module, attr)
                if changes:
                    return StateRead(f"{source_text(reached.module, node.value)}.{attr}",
                                     qualified(module), attr, changes)
        return None

    @staticmethod
    def class_of_name(expr: cst.BaseExpression, scope: Scope, module) -> ClassInfo | None:
        """The class of this file a bare name denotes (`Layer` in `Layer.scale`)."""
        if not isinstance(expr, cst.Name):
            return None
        bindings = scope.lookup(expr.value)
        node = bindings[0].node if len(bindings) == 1 else None
        if not isinstance(node, cst.ClassDef):  # BindingKind.CLASS
            return None
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
        first = self.context.memo.get(("first-write", id(node), attr),
                                      lambda: self.first_write_row(reached, node, attr))
        return first is not None and first < reached.module.start(read).row

    def first_write_row(self, reached: Reached, node: cst.FunctionDef, attr: str) -> int | None:
        """The row of the first plain statement `self.<attr> = ...` of the function body."""
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
                    return reached.module.start(statement).row
        return None

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
        return not any(b.kind in (BindingKind.DEF, BindingKind.CLASS, BindingKind.IMPORT)
                       for b in bindings)

    def global_state(self, reached: Reached, node: cst.Name, scope: Scope) -> StateRead | None:
        name = node.value
        bindings = scope.lookup(name)
        if not bindings or bindings[0].scope.kind != ScopeKind.MODULE:
            return None
        module = reached.module
        if any(b.kind in (BindingKind.DEF, BindingKind.CLASS) for b in bindings):
            return None
        imports = [b for b in bindings if b.kind == BindingKind.IMPORT]
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
                found = self.context.bindings.global_changes(parent, attr,
                                                             rebinding_counts=False)
                if found and not changes:
                    owner, attribute = qualified(parent), attr
                changes += found
            changes += self.context.bindings.own_changes(module, name)
        elif is_framework(top_package(module)):
            # Linting a framework itself (torch): only its own module rebinds its globals.
            changes = self.context.bindings.own_changes(module, name)
        else:
            changes = self.context.bindings.global_changes(module, name)
        if not changes:
            return None
        return StateRead(name, owner, attribute, changes)
