"""CKP401: checkpointed code changes outer state or logs; the replay does it again."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ckptlint.analysis.apis import Mode
from ckptlint.analysis.bindings import ChangeHow, first_attribute, root_name
from ckptlint.analysis.hazards import io_call, is_print, log_call, running_stats_call
from ckptlint.analysis.scopes import BindingKind, Scope, ScopeKind
from ckptlint.analysis.segment import (
    Reached,
    Segment,
    Write,
    WriteKind,
    compact,
    import_qualnames,
    is_framework,
    memo_containers,
)
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import qualified, segment_change, source_text
from ckptlint.findings import Finding

# A write's change in the binding model's words (`changes[].how`).
CHANGE_HOW = {WriteKind.ASSIGN: ChangeHow.REBOUND, WriteKind.AUGASSIGN: ChangeHow.AUGMENTED,
              WriteKind.ITEM: ChangeHow.MUTATED, WriteKind.DEL: ChangeHow.DELETED,
              WriteKind.METHOD: ChangeHow.MUTATED}
# What a write does to a plain name (`x = ...`, `x += ...`, `del x`).
NAME_WRITES = (WriteKind.ASSIGN, WriteKind.AUGASSIGN, WriteKind.DEL)


class SideEffectInSegment(SegmentRule):
    code = "CKP401"
    message = "{effect:phrase}{grad_guarded:phrase}"
    phrases = {
        "effect": {
            "write": "checkpointed code {write:phrase} {target:phrase}; the replay in backward "
                     "runs it again, so it happens twice per step",
            "running-stats": "checkpointed code runs `{state}` (`{module_class:last}`), which "
                             "updates its running statistics in training mode; the replay in "
                             "backward runs it again, so the momentum update is applied twice "
                             "per step",
            "output": "checkpointed code calls `{state}`; the replay in backward runs it again, "
                      "so the message is emitted twice",
            "io": "checkpointed code calls `{state}`; the replay in backward runs it again, so "
                  "it writes twice",
        },
        "write": {"accumulate": "accumulates into",
                  "augassign": "updates", "del": "deletes from", "item": "sets an item of",
                  "method": "mutates (`.{method}()`)"},
        "target": {
            "attribute": "`{state:short}`",
            "global": "the module global `{state}`",
            "nonlocal": "`{state}` of the enclosing function `{enclosing}`",
            "module-state": "the module state `{state:short}`",
        },
        "grad_guarded": {
            True: " (the `torch.is_grad_enabled()` guard only skips the forward of a reentrant "
                  "checkpoint; this one is non-reentrant)",
            False: "",
        },
    }

    def check(self, segment: Segment) -> Iterator[Finding]:
        resolver = self.context.resolver
        for reached, facts in self.functions(segment):
            seen: set[int] = set()
            for write in facts.writes:
                if write.once_guarded:
                    continue  # `if key not in SEEN: SEEN.add(key)`: the replay skips it
                if not write.accumulates:
                    continue  # a plain overwrite (`self.last = x.shape`): the replay writes
                    # the same, and a later read of it is CKP201/CKP204's business
                if write.grad_guarded and segment.mode != Mode.NON_REENTRANT:
                    continue  # run once by the reentrant `torch.is_grad_enabled()` guard
                adds = (write.how == WriteKind.ITEM
                        or write.method in ("add", "setdefault", "append"))
                if adds and compact(write.target) in self.memo_containers(reached):
                    continue  # memoization / run-once: the replay finds the entry, adds nothing
                state = self.outer_state(segment, reached, write)
                if state is None:
                    continue
                row = reached.module.start(write.node).row
                if row in seen:
                    continue
                seen.add(row)
                kind = "accumulate" if write.how == WriteKind.ASSIGN else write.how.value
                data = {"effect": "write", **state, "write": kind,
                        "changes": [segment_change(reached, write.node, CHANGE_HOW[write.how])],
                        "grad_guarded": write.grad_guarded}
                if write.how == WriteKind.METHOD:
                    data["method"] = write.method
                yield self.at(segment, reached, write.node, data)
            for call in facts.calls:
                if call.once_guarded or (call.grad_guarded and segment.mode != Mode.NON_REENTRANT):
                    continue
                norm = running_stats_call(resolver, call.node, reached.module, call.scope,
                                          reached.function.owner)
                func = call.node.func
                if norm is not None and isinstance(func, cst.Attribute):  # `self.bn(x)`
                    row = reached.module.start(call.node).row
                    if row not in seen:
                        seen.add(row)
                        attribute, module_class = norm
                        cls = self.self_class(reached, func.value, call.scope)
                        yield self.at(segment, reached, call.node, {
                            "effect": "running-stats", "state": f"self.{attribute}",
                            "owner": qualified(cls.module, cls.qualname) if cls else "",
                            "attribute": attribute, "module_class": module_class,
                            "changes": [segment_change(reached, call.node, ChangeHow.MUTATED)],
                            "grad_guarded": call.grad_guarded})
                    continue
                called: str | None
                effect = "output"
                if is_print(call.node, call.scope):
                    called, owner = "print", "builtins"
                elif (written := io_call(call.node, call.scope)) is not None:
                    called, owner, effect = written, written.rsplit(".", 1)[0], "io"
                else:
                    called, owner = log_call(call.node, call.scope), "logging"
                if called is None:
                    continue
                row = reached.module.start(call.node).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, call.node, {
                    "effect": effect, "state": called, "owner": owner,
                    "attribute": called.rsplit(".", 1)[-1],
                    "changes": [segment_change(reached, call.node, ChangeHow.CALLED)],
                    "grad_guarded": call.grad_guarded})

    @staticmethod
    def in_segment(segment: Segment, scope: Scope) -> bool:
        """Whether `scope` is the body of a function of the segment."""
        return any(reached.node is scope.node for reached in segment.functions)

    def in_setup_method(self, reached: Reached) -> bool:
        """A setup method (`__init__` calls it, e.g. `_set_cos_sin_cache`) reached from the
        segment re-initialises lazily; the binding model treats its writes as setup too."""
        node = reached.node
        class_scope = reached.scope.parent
        if not isinstance(node, cst.FunctionDef) or class_scope is None \
                or not isinstance(class_scope.node, cst.ClassDef):  # ScopeKind.CLASS
            return False
        return node.name.value in self.context.bindings.setup_names(class_scope.node)

    def memo_containers(self, reached: Reached) -> frozenset[str]:
        return self.context.memo.get(("memo-containers", id(reached.node)),
                                     lambda: memo_containers(reached.node))

    def outer_state(self, segment: Segment, reached: Reached, write: Write) -> dict | None:
        """The outer state `write` changes as data (`target` says which kind), or None for
        locals and unknowns."""
        target = write.target
        scope = write.scope
        module = reached.module
        root = root_name(target)
        if root is None:
            return None
        cls = self.self_class(reached, root, scope)
        if cls is not None:
            if target is root or reached.fresh_self or self.in_setup_method(reached):
                return None  # rebinding `self` itself
            changed = self.self_attribute(target)
            attribute = (changed.attr.value if isinstance(changed, cst.Attribute)
                         else source_text(module, changed))
            return {"target": "attribute", "state": source_text(module, changed),
                    "owner": qualified(cls.module, cls.qualname), "attribute": attribute}
        bindings = scope.lookup(root.value)
        if not bindings:
            return None
        module_global = {"target": "global", "state": root.value, "owner": qualified(module),
                         "attribute": root.value}
        if bindings[0].scope.kind != ScopeKind.MODULE:
            if isinstance(target, cst.Name) and write.how in NAME_WRITES \
                    and root.value in declared_global(scope):
                return module_global
            if (isinstance(target, cst.Name) and write.how in NAME_WRITES
                    and root.value in declared_nonlocal(scope)
                    and not self.in_segment(segment, bindings[0].scope)):
                enclosing = bindings[0].scope.qualname()
                return {"target": "nonlocal", "state": root.value,
                        "owner": qualified(module, enclosing), "attribute": root.value,
                        "enclosing": enclosing}
            return None  # locals, parameters, closures
        if any(b.kind in (BindingKind.DEF, BindingKind.CLASS) for b in bindings):
            return None
        if isinstance(target, cst.Name) and write.how in NAME_WRITES:
            if root.value in declared_global(scope):
                return module_global
            return None
        names = import_qualnames(target, scope) if write.how == WriteKind.METHOD else set()
        owner, attribute = qualified(module), root.value
        if any(b.kind == BindingKind.IMPORT for b in bindings):
            qualnames = import_qualnames(root, scope)
            if write.how == WriteKind.METHOD:
                # `np.sort(...)`/`torch.nn.init.normal_(w)`: functions of modules, not mutations.
                if all(is_framework(q) for q in qualnames | names):
                    return None
                if self.context.project.module_path(
                        cst.Module([]).code_for_node(target).replace(" ", "")) is not None:
                    return None
                for qualname in names:
                    if self.context.project.module_path(qualname) is not None:
                        return None
            owner, attribute = self.imported_owner(target, root, min(qualnames, default=""))
        return {"target": "module-state", "state": source_text(module, target), "owner": owner,
                "attribute": attribute}

    def imported_owner(self, target: cst.BaseExpression, root: cst.Name,
                       qualname: str) -> tuple[str, str]:
        """(module, global) that a write through the imported name `root` changes: `m.X`
        of `import m` is `m`'s `X`; `X` of `from m import X` too (`qualname`: what `root`
        imports)."""
        if not qualname:
            return root.value, root.value
        is_module = "." not in qualname or self.context.project.module_path(qualname) is not None
        if target is not root and is_module:
            return qualname, first_attribute(target) or root.value
        if "." in qualname:
            parent, name = qualname.rsplit(".", 1)
            return parent, name
        return qualname, root.value

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
    while current is not None and current.kind != ScopeKind.MODULE:
        names |= getattr(current, kind)
        current = current.parent
    return names
