"""CKP205: an op inside a segment whose output shape depends on tensor values.

`nonzero`, `argwhere`, `masked_select`, `unique`, `bincount` without `minlength`,
`repeat_interleave` with tensor repeats, one-argument `where`, indexing with a boolean mask,
and splits by sizes read from a tensor (`.tolist()`). An MoE expert dispatch (`x[idx]` with
`idx` from `where`/`nonzero` on the routing) is reported once, at the op computing the
indices. If the values differ in the replay, so do the shapes of what it saves.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import libcst as cst

from ckptlint.analysis.scopes import ASSIGNED, Binding, BindingKind, Scope, ScopeKind
from ckptlint.analysis.segment import Reached, Segment, import_qualnames, is_framework
from ckptlint.analysis.tensors import METADATA_ATTRS, STRONG, WEAK, TensorInference
from ckptlint.checks.argument_mutation import is_method, passed_parameters
from ckptlint.checks.segment_base import SegmentRule
from ckptlint.checks.state_facts import source_text
from ckptlint.findings import Finding
from ckptlint.syntax.walk import Visitor

# Ops whose output length is the number of values that pass a test.
COUNTING_OPS = {"nonzero": "nonzero", "argwhere": "argwhere", "masked_select": "masked_select",
                "unique": "unique", "unique_consecutive": "unique"}
SPLITS = frozenset({"split", "tensor_split", "split_with_sizes"})
# Boolean-valued tensor ops (method or `torch.` function): their result indexes as a mask.
BOOLEAN_OPS = frozenset({
    "bool", "eq", "ne", "gt", "lt", "ge", "le", "greater", "less", "greater_equal",
    "less_equal", "not_equal", "isnan", "isinf", "isfinite", "isneginf", "isposinf",
    "logical_not", "logical_and", "logical_or", "logical_xor", "isin", "signbit",
})
MASK_OPERATORS = (cst.BitAnd, cst.BitOr, cst.BitXor)
# Ops that compute the same values from the same inputs on every run (comparisons, logic,
# casts, shapes, integer bookkeeping): a shape computed only through them from the segment's
# inputs comes out the same in the replay, which gets the very inputs the forward got.
EXACT_OPS = BOOLEAN_OPS | frozenset({
    "long", "int", "float", "half", "bfloat16", "double", "to", "type_as", "view", "reshape",
    "squeeze", "unsqueeze", "flatten", "unflatten", "transpose", "permute", "contiguous",
    "clone", "detach", "expand", "expand_as", "sum", "cumsum", "any", "all", "max", "min",
    "amax", "amin", "nonzero", "argwhere", "where", "tolist", "item", "flip", "cat", "stack",
    "arange", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "masked_fill",
    "diff", "unique", "numel", "size", "new_zeros", "new_ones", "new_full", "abs", "chunk",
    "split", "narrow", "index_select", "gather", "repeat", "repeat_interleave", "bincount",
    "one_hot", "len", "range", "tuple", "list",
})
CONSTANT_NAMES = frozenset({"None", "True", "False"})
COMPARISONS = (cst.Equal, cst.NotEqual, cst.LessThan, cst.LessThanEqual, cst.GreaterThan,
               cst.GreaterThanEqual)


class ShapeOps(Visitor):
    """The calls and the read subscripts of one function body (nested defs excluded)."""

    def __init__(self, reached: Reached) -> None:
        self.scopes = reached.module.scopes.scope_of
        self.stack: list[Scope] = [reached.scope]
        self.calls: list[tuple[cst.Call, Scope]] = []
        self.subscripts: list[tuple[cst.Subscript, Scope]] = []
        self.stores: set[int] = set()
        self.walk(reached.node.body)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return False
        scope = self.scopes.get(id(node))
        if scope is not None:
            self.stack.append(scope)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if not isinstance(original_node, (cst.FunctionDef, cst.ClassDef)) \
                and self.scopes.get(id(original_node)) is not None:
            self.stack.pop()

    def store(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.store(element.value)
        elif isinstance(target, cst.Subscript):
            self.stores.add(id(target))  # `x[mask] = 0`: an in-place fill keeps x's shape

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self.store(target.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.store(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.store(node.target)

    def visit_Del(self, node: cst.Del) -> None:
        self.store(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append((node, self.stack[-1]))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if id(node) not in self.stores:
            self.subscripts.append((node, self.stack[-1]))


class DataDependentShape(SegmentRule):
    """An op whose output shape depends on tensor values, inside checkpointed code."""

    code = "CKP205"
    message = ("`{expression:short}` {op:phrase}, so its output shape depends on tensor "
               "values: if they differ in the replay (nondeterministic kernels, MoE routing, "
               "changed state) the replay saves tensors of other shapes and torch raises a "
               "metadata CheckpointError (reentrant: wrong gradients); compute it outside the "
               "checkpoint and pass it in, or save it with a selective checkpoint policy")
    phrases = {"op": {
        "nonzero": "keeps the positions of nonzero values",
        "argwhere": "keeps the positions of nonzero values",
        "masked_select": "keeps the values a mask selects",
        "unique": "keeps the distinct values",
        "bincount": "counts up to the largest value (no `minlength`)",
        "repeat_interleave": "repeats by counts held in a tensor",
        "where": "is a one-argument `where` (the positions of true values)",
        "boolean-mask": "indexes with a boolean mask",
        "split-sizes": "splits by sizes read from a tensor (`.tolist()`)",
    }}

    def check(self, segment: Segment) -> Iterator[Finding]:
        inputs = passed_parameters(self.context, segment)
        for reached, _ in self.functions(segment):
            inference = self.context.tensors(reached)
            stable = ReplayStable(reached, inference,
                                  frozenset(inputs.get(id(reached.node), {})))
            ops = self.context.memo.get(("shape-ops", id(reached.node)),
                                        partial(ShapeOps, reached))
            seen: set[int] = set()
            found: list[tuple[cst.CSTNode, str]] = []
            for call, scope in ops.calls:
                shaped = self.call_op(call, scope, inference)
                if shaped is not None and not stable.at(shaped[1], scope, call):
                    found.append((call, shaped[0]))
            for subscript, scope in ops.subscripts:
                mask = self.mask(subscript, scope, inference)
                if mask is not None and not stable.at(mask, scope, subscript):
                    found.append((subscript, "boolean-mask"))
            for node, op in found:
                row = reached.module.start(node).row
                if row in seen:
                    continue
                seen.add(row)
                yield self.at(segment, reached, node, {
                    "expression": source_text(reached.module, node), "op": op})

    # -- calls ------------------------------------------------------------------------------
    def call_op(self, call: cst.Call, scope: Scope,
                inference: TensorInference) -> tuple[str, cst.BaseExpression] | None:
        """(the op, the operand whose values decide its shape), for ops of CKP205."""
        func = call.func
        names = import_qualnames(func, scope)
        torch_names = [name for name in names if name.startswith("torch.")]
        if torch_names:
            name = torch_names[0].rsplit(".", 1)[-1]
            arguments = list(call.args)  # the tensor is the first argument
        elif names or not isinstance(func, cst.Attribute):
            return None  # another library's function (`np.unique`), or a plain call
        else:
            name = func.attr.value
            receiver = func.value
            if any(is_framework(q) and not q.startswith("torch") for q in
                   import_qualnames(receiver, scope)):
                return None  # `np.nonzero`, `os.path.split`
            if name not in ("nonzero", "argwhere", "masked_select", "bincount") and \
                    inference.level_at(receiver, scope, call) < WEAK:
                return None
            arguments = [cst.Arg(receiver), *call.args]
        positional = [arg.value for arg in arguments if arg.keyword is None and not arg.star]
        keywords = {arg.keyword.value for arg in arguments if arg.keyword is not None}
        if not positional:
            return None
        if name in COUNTING_OPS:
            # masked_select(x, mask): the mask decides
            operand = positional[-1] if name == "masked_select" else positional[0]
            return COUNTING_OPS[name], operand
        if name == "bincount":
            if "minlength" in keywords or len(positional) > 2:
                return None
            return "bincount", positional[0]
        if name == "where":
            return ("where", positional[0]) if len(arguments) == 1 and not keywords else None
        if name == "repeat_interleave":
            repeats = positional[1] if len(positional) > 1 else next(
                (arg.value for arg in arguments if arg.keyword is not None
                 and arg.keyword.value == "repeats"), None)
            if repeats is None or "output_size" in keywords:
                return None
            return ("repeat_interleave", repeats) \
                if inference.level_at(repeats, scope, call) == STRONG else None
        if name in SPLITS:
            sizes = positional[1] if len(positional) > 1 else None
            return ("split-sizes", sizes) \
                if sizes is not None and self.read_from_tensor(sizes, scope) else None
        return None

    def read_from_tensor(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
        """`counts.tolist()`, or a name only ever bound to one."""
        if depth > 4:
            return False
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            return expr.func.attr.value == "tolist"
        if isinstance(expr, cst.Name):
            bindings = scope.lookup(expr.value)
            return bool(bindings) and all(
                b.kind in ASSIGNED and b.value is not None
                and self.read_from_tensor(b.value, b.scope, depth + 1) for b in bindings)
        return False

    # -- boolean masks -------------------------------------------------------------------------
    def mask(self, subscript: cst.Subscript, scope: Scope,
             inference: TensorInference) -> cst.BaseExpression | None:
        """The boolean mask a tensor is indexed with, if any."""
        if inference.level_at(subscript.value, scope, subscript) < WEAK:
            return None  # a list or a dict indexed, not a tensor
        for element in subscript.slice:
            if isinstance(element.slice, cst.Index) \
                    and self.boolean(element.slice.value, scope, inference, subscript):
                return element.slice.value
        return None

    def boolean(self, expr: cst.BaseExpression, scope: Scope, inference: TensorInference,
                point: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `expr` is a boolean tensor: a comparison of tensors, a boolean op on them,
        `~`/`&`/`|` of masks, or a name only ever bound to one."""
        if depth > 6:
            return False
        if isinstance(expr, cst.Comparison):
            return all(isinstance(c.operator, COMPARISONS) for c in expr.comparisons) \
                and inference.level_at(expr, scope, point) >= WEAK
        if isinstance(expr, cst.UnaryOperation):
            return isinstance(expr.operator, cst.BitInvert) and \
                self.boolean(expr.expression, scope, inference, point, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return isinstance(expr.operator, MASK_OPERATORS) and (
                self.boolean(expr.left, scope, inference, point, depth + 1)
                or self.boolean(expr.right, scope, inference, point, depth + 1))
        if isinstance(expr, cst.Call):
            return self.boolean_call(expr, scope, inference, point)
        if isinstance(expr, cst.Subscript):  # `keep[0]`: part of a mask
            return self.boolean(expr.value, scope, inference, point, depth + 1)
        if isinstance(expr, cst.Name):
            bindings = scope.lookup(expr.value)
            return bool(bindings) and all(
                b.kind in ASSIGNED and b.value is not None
                and self.boolean(b.value, b.scope, inference, b.node, depth + 1)
                for b in bindings)
        return False

    @staticmethod
    def boolean_call(call: cst.Call, scope: Scope, inference: TensorInference,
                     point: cst.CSTNode) -> bool:
        func = call.func
        names = import_qualnames(func, scope)
        if names:
            return any(name.startswith("torch.") and name.rsplit(".", 1)[-1] in BOOLEAN_OPS
                       for name in names)
        if not isinstance(func, cst.Attribute):
            return False
        method = func.attr.value
        if method in ("to", "type") and call.args:
            dtype = call.args[0].value
            return (isinstance(dtype, cst.Attribute) and dtype.attr.value == "bool"
                    and inference.level_at(func.value, scope, point) >= WEAK)
        return method in BOOLEAN_OPS and inference.level_at(func.value, scope, point) >= WEAK


def is_torch_constant(expr: cst.Attribute, scope: Scope) -> bool:
    """`torch.bool`, `torch.float32`: a name of the torch module read as a value (a call of
    one is `exact_call`'s business)."""
    names = import_qualnames(expr, scope)
    return bool(names) and all(name.count(".") == 1 and name.startswith("torch.")
                               for name in names)


class ReplayStable:
    """Whether an expression comes out the same in the replay: it is computed only from the
    segment's inputs (parameters holding what was passed in), constants, `self` attributes
    (state that changes is CKP201's business) and metadata, through `EXACT_OPS`. A learned
    computation (a module call, `@`, `softmax`) or module-level state is not.

    A name is read in execution order: what it holds where it is read is what its bindings
    that reach that point assigned (the last one before it; after branches, each branch's),
    so `mask = mask & routed` after a use does not change what the use read."""

    def __init__(self, reached: Reached, inference: TensorInference,
                 inputs: frozenset[str]) -> None:
        self.reached = reached
        self.inference = inference
        self.inputs = inputs
        self.point: cst.CSTNode = reached.node
        params = reached.node.params
        positional = [*params.posonly_params, *params.params]
        self.self_name = positional[0].name.value if is_method(reached) and positional else None

    def at(self, expr: cst.BaseExpression, scope: Scope, point: cst.CSTNode) -> bool:
        """Whether `expr`, evaluated at `point` (a node of the function), is stable."""
        previous, self.point = self.point, point
        try:
            return self.expression(expr, scope)
        finally:
            self.point = previous

    def expression(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
        if depth > 12:
            return False
        deeper = depth + 1
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return True
        if isinstance(expr, cst.Name):
            return self.name(expr, scope, deeper)
        if isinstance(expr, cst.Attribute):
            return expr.attr.value in METADATA_ATTRS or self.is_self(expr.value, scope) \
                or is_torch_constant(expr, scope) or self.expression(expr.value, scope, deeper)
        if isinstance(expr, cst.Subscript):
            return self.expression(expr.value, scope, deeper) and all(
                self.part(element.slice, scope, deeper) for element in expr.slice)
        if isinstance(expr, cst.BinaryOperation):
            return not isinstance(expr.operator, cst.MatrixMultiply) and \
                self.expression(expr.left, scope, deeper) and \
                self.expression(expr.right, scope, deeper)
        if isinstance(expr, cst.UnaryOperation):
            return self.expression(expr.expression, scope, deeper)
        if isinstance(expr, (cst.BooleanOperation,)):
            return self.expression(expr.left, scope, deeper) and \
                self.expression(expr.right, scope, deeper)
        if isinstance(expr, cst.Comparison):
            return self.expression(expr.left, scope, deeper) and all(
                self.expression(c.comparator, scope, deeper) for c in expr.comparisons)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return all(self.expression(e.value, scope, deeper) for e in expr.elements)
        if isinstance(expr, cst.IfExp):
            return all(self.expression(part, scope, deeper)
                       for part in (expr.test, expr.body, expr.orelse))
        if isinstance(expr, cst.Call):
            return self.exact_call(expr, scope, deeper)
        return False

    def counted(self, iterable: cst.BaseExpression | None, scope: Scope, depth: int) -> bool:
        """`range(...)` of stable bounds: a loop over it binds the same integers in the
        replay."""
        return (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name)
                and iterable.func.value == "range" and not scope.lookup("range")
                and all(self.expression(arg.value, scope, depth) for arg in iterable.args))

    def part(self, node: cst.BaseSlice, scope: Scope, depth: int) -> bool:
        if isinstance(node, cst.Index):
            return self.expression(node.value, scope, depth)
        if not isinstance(node, cst.Slice):
            return False
        return all(self.expression(bound, scope, depth) for bound in
                   (node.lower, node.upper, node.step) if bound is not None)

    def exact_call(self, call: cst.Call, scope: Scope, depth: int) -> bool:
        func = call.func
        names = import_qualnames(func, scope)
        if names:
            if not all(name.rsplit(".", 1)[-1] in EXACT_OPS
                       and name.split(".", 1)[0] in ("torch", "builtins") for name in names):
                return False
        elif not (isinstance(func, cst.Attribute) and func.attr.value in EXACT_OPS
                  and self.expression(func.value, scope, depth)):
            return False
        return all(self.expression(arg.value, scope, depth) for arg in call.args)

    def is_self(self, expr: cst.BaseExpression, scope: Scope) -> bool:
        if self.self_name is None or not isinstance(expr, cst.Name) \
                or expr.value != self.self_name:
            return False
        bindings = scope.lookup(expr.value)
        return len(bindings) == 1 and bindings[0].kind == BindingKind.PARAM \
            and bindings[0].scope is self.reached.scope

    def name(self, name: cst.Name, scope: Scope, depth: int) -> bool:
        if name.value in CONSTANT_NAMES:
            return True
        bindings = self.inference.reaching_at(scope, name.value, self.point)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind == BindingKind.PARAM:
                if binding.scope is not self.reached.scope or name.value not in self.inputs:
                    return False
            elif binding.kind == BindingKind.FOR and binding.scope.kind != ScopeKind.MODULE:
                if not self.counted(binding.value, binding.scope, depth):
                    return False
            elif binding.scope.kind == ScopeKind.MODULE or binding.kind not in ASSIGNED \
                    or not self.at_binding(binding, depth):
                return False
        return True

    def at_binding(self, binding: Binding, depth: int) -> bool:
        """The value a binding assigned (or the value it was unpacked from: `batch, length, _
        = x.shape`), read where it was assigned."""
        value = binding.value if binding.value is not None else binding.unpacked
        if value is None:
            return False
        previous, self.point = self.point, binding.node
        try:
            return self.expression(value, binding.scope, depth)
        finally:
            self.point = previous
