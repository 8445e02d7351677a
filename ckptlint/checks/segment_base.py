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
from ckptlint.analysis.phases import Because, Phase, When, function_key
from ckptlint.analysis.resolve import ClassInfo
from ckptlint.analysis.scopes import BindingKind, Scope, ScopeKind
from ckptlint.analysis.segment import (
    FunctionFacts,
    Occurrence,
    Reached,
    Segment,
    WriteKind,
    compact,
    dominates,
    import_qualnames,
    is_framework,
    iter_segment,
    top_package,
)
from ckptlint.checks.base import Rule
from ckptlint.checks.state_facts import (
    StateHazard,
    StateRead,
    in_segment,
    qualified,
    source_text,
)
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

    def changed_state_reads(self, segment: Segment, reached: Reached, facts: FunctionFacts, *,
                            in_condition: bool) -> Iterator[tuple[Occurrence, StateHazard]]:
        """(load, the state read) for reads of state that can change between the segment's
        forward and its replay, once per row and state: those in branch conditions (CKP204)
        or the others (CKP201)."""
        seen: set[tuple[int, str]] = set()
        for load in facts.loads:
            if bool(load.in_condition) != in_condition:
                continue
            read = self.state_changes(reached, load.node, load.scope, load.attr)
            if read is None:
                continue
            hazard = self.replay_relevant(segment, reached, facts, load, read)
            if hazard is None:
                continue
            row = reached.module.start(load.node).row
            if (row, read.state) not in seen:
                seen.add((row, read.state))
                yield load, hazard

    def replay_relevant(self, segment: Segment, reached: Reached, facts: FunctionFacts,
                        load: Occurrence, read: StateRead) -> StateHazard | None:
        """The read with the changes that can make the replay see another value, or None.

        A read that a plain assignment of the same state earlier in the function always
        precedes sees this run's value, in the forward and the replay alike. Otherwise a
        change by the segment itself counts (the replay reads what the forward left), and
        one elsewhere counts when it runs between the forward and the replay: in phases
        1-4, or in any phase with `state-changes = "any"`.
        """
        if self.assigned_before(reached, facts, load, read):
            return None
        bindings = self.context.bindings
        every_phase = self.context.config.state_changes == "any"
        kept = []
        for change in read.changes:
            when = (When(Phase.SEGMENT, Because.SEGMENT, function_key(change.where))
                    if in_segment(segment, change, self.context.project)
                    else bindings.when(change))
            if change.foreign and when.because == Because.UNCALLED:
                continue  # matched by name only, in code nothing in the project calls
            if when.runtime or every_phase:
                kept.append((change, when))
        return StateHazard(read, kept) if kept else None

    def assigned_before(self, reached: Reached, facts: FunctionFacts, load: Occurrence,
                        read: StateRead) -> bool:
        """A plain assignment of the state read (`self.mask = x > 0`, `global SCALE; SCALE =
        ...`), not built from its old value, always runs before `load` in this function."""
        node = load.node
        for write in facts.writes:
            if write.how != WriteKind.ASSIGN or not dominates(write.path, load.path):
                continue
            target = write.target
            if isinstance(node, cst.Attribute) and isinstance(target, cst.Attribute):
                same = (target.attr.value == read.attribute
                        and compact(target.value) == compact(node.value))
            else:
                same = (isinstance(node, cst.Name) and isinstance(target, cst.Name)
                        and target.value == node.value)
            if same and not write.reads_itself():  # the costly test last
                return True
        return False

    def state_changes(self, reached: Reached, node: cst.CSTNode, scope: Scope,
                      attr: str | None = None) -> StateRead | None:
        """The state `node` reads and where it changes, when that state is mutable.

        `attr`: the name is read as `name.attr`; changes of other attributes do not count.
        Kept per run: a function many segments reach is asked about the same reads by each
        (the answer depends on the class its `self` stands for and whether that object is
        the segment's own, besides the node).
        """
        owner = reached.function.owner
        key = ("state-changes", id(node), attr, id(owner.node) if owner is not None else None,
               reached.fresh_self)
        return self.context.memo.get(key, lambda: self.find_state_changes(reached, node, scope,
                                                                          attr))

    def find_state_changes(self, reached: Reached, node: cst.CSTNode, scope: Scope,
                           attr: str | None) -> StateRead | None:
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
                if changes:
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
                                     qualified(owner.module, owner.qualname), attr,
                                     changes)
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
                if (parent_path is None or not project.may_bind(parent_path, attr)
                        or project.imported_names(parent_path, attr) is not None):
                    continue  # not bound there, or imported there: not a global it assigns
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
