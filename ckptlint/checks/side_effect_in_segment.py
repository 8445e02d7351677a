"""CKP401: checkpointed code changes outer state or logs; the replay does it again."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ckptlint.analysis.bindings import root_name
from ckptlint.findings import Finding
from ckptlint.analysis.hazards import is_print, log_call, running_stats_call
from ckptlint.checks.segment_base import SegmentRule, snippet
from ckptlint.analysis.scopes import Scope
from ckptlint.analysis.segment import (Reached, Segment, Write, compact, import_qualnames, is_framework,
                              memo_containers)
from ckptlint.analysis.sites import NON_REENTRANT

AGAIN = "the replay in backward runs it again"


class SideEffectInSegment(SegmentRule):
    code = "CKP401"

    def check(self, segment: Segment) -> Iterator[Finding]:
        self._segment_nodes = {id(reached.node) for reached in segment.functions}
        resolver = self.context.resolver
        for reached, facts in self.functions(segment):
            seen: set[int] = set()
            for write in facts.writes:
                if write.once_guarded:
                    continue  # `if key not in SEEN: SEEN.add(key)`: the replay skips it
                if write.grad_guarded and segment.mode != NON_REENTRANT:
                    continue  # run once by the reentrant `torch.is_grad_enabled()` guard
                if (write.how == "item" or write.method in ("add", "setdefault", "append")) \
                        and compact(write.target) in self.memo(reached):
                    continue  # memoization / run-once: the replay finds the entry, adds nothing
                what = self.outer_state(reached, write)
                if what is None:
                    continue
                row = reached.module.start(write.node).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, write.node,
                              f"checkpointed code {self.verb(write)} {what}; {AGAIN}, so it "
                              f"happens twice per step{self.guard_note(write.grad_guarded)}")
            for call in facts.calls:
                if call.once_guarded or (call.grad_guarded and segment.mode != NON_REENTRANT):
                    continue
                norm = running_stats_call(resolver, call.node, reached.module, call.scope,
                                          reached.function.owner)
                if norm is not None:
                    row = reached.module.start(call.node).row
                    if row not in seen:
                        seen.add(row)
                        yield self.at(segment, reached, call.node,
                                      f"checkpointed code runs {norm}, which updates its running "
                                      f"statistics in training mode; {AGAIN}, so the momentum "
                                      f"update is applied twice per step"
                                      f"{self.guard_note(call.grad_guarded)}")
                    continue
                if is_print(call.node, call.scope):
                    what = "`print`"
                else:
                    what = log_call(call.node, call.scope)
                if what is None:
                    continue
                effect = "so the message is emitted twice"
                row = reached.module.start(call.node).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, call.node,
                              f"checkpointed code calls {what}; {AGAIN}, "
                              f"{effect}{self.guard_note(call.grad_guarded)}")

    def in_segment(self, scope: Scope) -> bool:
        """Whether `scope` is the body of a function of the segment being checked."""
        return id(scope.node) in self._segment_nodes

    def in_setup_method(self, reached: Reached) -> bool:
        """A setup method (`__init__` calls it, e.g. `_set_cos_sin_cache`) reached from the
        segment re-initialises lazily; the binding model treats its writes as setup too."""
        node = reached.node
        class_scope = reached.scope.parent
        if not isinstance(node, cst.FunctionDef) or class_scope is None or class_scope.kind != "class":
            return False
        return node.name.value in self.bindings.setup_names(class_scope.node)

    def memo(self, reached: Reached) -> frozenset[str]:
        memos = self.context.cache.setdefault("memo-containers", {})
        key = id(reached.node)
        if key not in memos:
            memos[key] = memo_containers(reached.node)
        return memos[key]

    @staticmethod
    def guard_note(guarded: bool) -> str:
        if not guarded:
            return ""
        return (" (the `torch.is_grad_enabled()` guard only skips the forward of a reentrant "
                "checkpoint; this one is non-reentrant)")

    @staticmethod
    def verb(write: Write) -> str:
        if write.how == "assign":
            return "assigns"
        if write.how == "augassign":
            return "updates"
        if write.how == "del":
            return "deletes"
        if write.how == "item":
            return "sets an item of"
        return f"mutates (`.{write.method}()`)"

    def outer_state(self, reached: Reached, write: Write) -> str | None:
        """A description of the outer state `write` changes, or None for locals/unknowns."""
        target = write.target
        scope = write.scope
        module = reached.module
        root = root_name(target)
        if root is None:
            return None
        if self.self_class(reached, root, scope) is not None:
            if target is root or reached.fresh_self or self.in_setup_method(reached):
                return None  # rebinding `self` itself
            return f"`{snippet(module, self.self_attribute(target))}`"
        bindings = scope.lookup(root.value)
        if not bindings:
            return None
        if bindings[0].scope.kind != "module":
            if isinstance(target, cst.Name) and write.how in ("assign", "augassign", "del") \
                    and root.value in declared_global(scope):
                return f"the module global `{root.value}`"
            if (isinstance(target, cst.Name) and write.how in ("assign", "augassign", "del")
                    and root.value in declared_nonlocal(scope)
                    and not self.in_segment(bindings[0].scope)):
                return f"`{root.value}` of the enclosing function `{bindings[0].scope.qualname()}`"
            return None  # locals, parameters, closures
        if any(b.kind in ("def", "class") for b in bindings):
            return None
        if isinstance(target, cst.Name) and write.how in ("assign", "augassign", "del"):
            if root.value in declared_global(scope):
                return f"the module global `{root.value}`"
            return None
        names = import_qualnames(target, scope) if write.how == "method" else set()
        if any(b.kind == "import" for b in bindings):
            qualnames = import_qualnames(root, scope)
            if write.how == "method":
                # `np.sort(...)`/`torch.nn.init.normal_(w)`: functions of modules, not mutations.
                if all(is_framework(q) for q in qualnames | names):
                    return None
                if self.context.project.module_path(
                        cst.Module([]).code_for_node(target).replace(" ", "")) is not None:
                    return None
                for qualname in names:
                    if self.context.project.module_path(qualname) is not None:
                        return None
            return f"the module state `{snippet(module, target)}`"
        return f"the module state `{snippet(module, target)}`"

    @staticmethod
    def self_attribute(target: cst.BaseExpression) -> cst.BaseExpression:
        """`self.buf` for `self.buf`, `self.buf.data`, `self.buf[0]`: the attribute of self."""
        node = target
        while isinstance(node, (cst.Attribute, cst.Subscript)):
            if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
                return node
            node = node.value
        return target


def declared_nonlocal(scope: Scope) -> set[str]:
    return declared(scope, "nonlocal_names")


def declared_global(scope: Scope) -> set[str]:
    return declared(scope, "global_names")


def declared(scope: Scope, kind: str) -> set[str]:
    """Names declared `global` or `nonlocal` (`kind`: that set's attribute) in `scope` or
    in the function scopes around it."""
    names: set[str] = set()
    current: Scope | None = scope
    while current is not None and current.kind != "module":
        names |= getattr(current, kind)
        current = current.parent
    return names
