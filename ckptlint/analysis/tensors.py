"""Light tensor-value inference: does an expression's value depend on tensor *values*?

Three levels:
- NONE: not data (shapes, dtypes, devices, `is None`, `isinstance`, `len`, config and
  instance attributes, literals, `self.training`).
- WEAK: might be a tensor (a parameter of a segment function, arithmetic on one). Too weak
  to report a branch on: `if step > warmup` is usually about an int.
- STRONG: certainly data: results of torch ops and tensor methods, `.item()`, `.any()`,
  `.all()`, `.tolist()`, `torch.isnan(...)`, calls of torch modules, and expressions built
  from them.

Only STRONG conditions are reported (CKP203). A local name read at a point takes the
strongest level of the values assigned to it that can reach that point: those above it, and
those later in a loop around both (`if drop > 0.0: drop = torch.rand(())` is not a tensor
branch when `drop` is a float before it).
"""

from __future__ import annotations

import libcst as cst

from ckptlint.analysis.resolve import Resolver
from ckptlint.analysis.scopes import (
    ASSIGNED,
    Binding,
    BindingKind,
    Scope,
    ScopeKind,
    is_staticmethod,
    live_bindings,
)
from ckptlint.analysis.segment import assigned_constructors, import_qualnames, is_framework
from ckptlint.syntax.walk import Visitor

NONE, WEAK, STRONG = 0, 1, 2

# Tensor metadata: never data.
METADATA_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "is_meta", "is_sparse",
    "is_quantized", "requires_grad", "is_leaf", "grad_fn", "layout", "names", "is_mps",
    "is_nested", "itemsize", "nbytes",
})
METADATA_METHODS = frozenset({
    "size", "dim", "numel", "nelement", "element_size", "is_contiguous", "is_floating_point",
    "is_complex", "get_device", "stride", "storage_offset", "data_ptr", "type", "ndimension",
    "is_pinned", "is_shared", "is_signed", "untyped_storage", "dim_order", "is_set_to",
    "has_names", "keys", "values", "items", "get", "startswith", "endswith", "split", "format",
    "join", "lower", "upper", "strip", "replace", "copy", "index", "count",
})
# Attributes that give a view of the same data.
VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
# Tensor methods: on a possible tensor (WEAK), the result is certainly data.
TENSOR_METHODS = frozenset({
    "item", "tolist", "any", "all", "sum", "mean", "max", "min", "amax", "amin", "aminmax",
    "abs", "norm", "std", "var", "prod", "argmax", "argmin", "float", "double", "half",
    "bfloat16", "long", "int", "bool", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf",
    "isfinite", "nonzero", "count_nonzero", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh",
    "softmax", "log_softmax", "matmul", "mm", "bmm", "view", "reshape", "flatten", "squeeze",
    "unsqueeze", "permute", "transpose", "contiguous", "clone", "detach", "masked_fill",
    "clamp", "clip", "pow", "type_as", "expand", "expand_as", "repeat", "gather", "scatter",
    "index_select", "cumsum", "cumprod", "topk", "sort", "argsort", "allclose", "equal",
    "isclose", "logical_and", "logical_or", "logical_not", "numpy", "to", "cpu", "cuda",
    "square", "neg", "sign", "round", "floor", "ceil", "trunc", "median", "mode", "unique",
    "masked_select", "where", "sub", "add", "mul", "div", "relu", "new_zeros",
})
# Boolean-valued questions about tensor values.
TORCH_PREDICATES = frozenset({
    "any", "all", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "isreal", "equal",
    "allclose", "isclose", "is_nonzero", "count_nonzero",
})
# torch functions that return no tensor data.
TORCH_NOT_DATA = frozenset({
    "is_tensor", "is_storage", "is_grad_enabled", "is_floating_point", "is_complex", "numel",
    "get_default_dtype", "is_autocast_enabled", "is_inference_mode_enabled", "device", "dtype",
    "Size", "finfo", "iinfo", "result_type", "promote_types", "can_cast", "broadcast_shapes",
    "typename", "get_autocast_gpu_dtype", "get_autocast_dtype", "is_deterministic_algorithms",
    "are_deterministic_algorithms_enabled", "is_anomaly_enabled", "is_warn_always_enabled",
    "get_rng_state", "initial_seed", "seed", "manual_seed", "set_grad_enabled", "no_grad",
    "enable_grad", "inference_mode", "autocast", "is_same_size", "compiled_with_cxx11_abi",
    "is_conj", "is_neg", "is_inference", "get_num_threads", "is_vulkan_available",
    "sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_ite", "_assert",
    "is_available", "current_device", "device_count", "get_device_name",
})
NOT_DATA_BUILTINS = frozenset({
    "len", "isinstance", "issubclass", "hasattr", "getattr", "type", "callable", "id", "str",
    "repr", "hash", "vars", "dir", "format", "range", "enumerate", "zip", "iter", "next",
    "print", "list", "tuple", "dict", "set", "frozenset", "sorted", "reversed", "map",
    "filter", "object", "super", "open",
})
VALUE_BUILTINS = frozenset({"bool", "int", "float", "abs", "round", "min", "max", "sum", "any",
                            "all", "complex", "divmod", "pow"})


class TensorInference:
    """Levels of expressions inside one function of a segment."""

    def __init__(self, resolver: Resolver, module, function_scope: Scope,
                 function_node: cst.FunctionDef | cst.Lambda, owner=None) -> None:
        self.resolver = resolver
        self.module = module
        self.function_scope = function_scope
        self.function_node = function_node
        self.owner = owner
        self._names: dict[tuple[int, str, tuple[int, ...]], int] = {}
        self._params = self.tensor_params()
        # Where names are read: only bindings that can reach this node count (None: all).
        self._point: cst.CSTNode | None = None
        self._order: tuple[dict[int, tuple[int, tuple[int, ...]]], dict[int, int]] | None = None

    def tensor_params(self) -> set[str]:
        node = self.function_node
        params = node.params
        ordinary = [*params.posonly_params, *params.params]
        if isinstance(node, cst.FunctionDef) and self.function_scope.parent is not None \
                and self.function_scope.parent.kind == ScopeKind.CLASS and ordinary \
                and not is_staticmethod(node):
            ordinary = ordinary[1:]  # self / cls
        names: set[str] = set()
        for param in [*ordinary, *params.kwonly_params]:
            if param.default is not None and not (
                    isinstance(param.default, cst.Name) and param.default.value == "None"):
                continue  # a literal/config default: a flag or a size, not a tensor
            if param.annotation is not None and not annotation_may_be_tensor(
                    param.annotation.annotation):
                continue
            names.add(param.name.value)
        return names

    # -- the level of an expression ------------------------------------------------------
    def level_at(self, expr: cst.BaseExpression, scope: Scope, point: cst.CSTNode) -> int:
        """The level of `expr` evaluated at `point`, a node of this function."""
        previous, self._point = self._point, point
        try:
            return self.level(expr, scope)
        finally:
            self._point = previous

    def level(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> int:
        if depth > 30:
            return NONE
        if isinstance(expr, cst.Name):
            return self.name_level(expr.value, scope, depth)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in VIEW_ATTRS:
                return self.level(expr.value, scope, depth + 1)
            return NONE
        if isinstance(expr, cst.Subscript):
            return self.level(expr.value, scope, depth + 1)
        if isinstance(expr, cst.Call):
            return self.call_level(expr, scope, depth)
        if isinstance(expr, cst.BinaryOperation):
            return max(self.level(expr.left, scope, depth + 1),
                       self.level(expr.right, scope, depth + 1))
        if isinstance(expr, cst.UnaryOperation):
            return self.level(expr.expression, scope, depth + 1)
        if isinstance(expr, cst.BooleanOperation):
            return max(self.level(expr.left, scope, depth + 1),
                       self.level(expr.right, scope, depth + 1))
        if isinstance(expr, cst.IfExp):
            return max(self.level(expr.body, scope, depth + 1),
                       self.level(expr.orelse, scope, depth + 1))
        if isinstance(expr, cst.Comparison):
            return self.comparison_level(expr, scope, depth)
        return NONE

    def comparison_level(self, expr: cst.Comparison, scope: Scope, depth: int) -> int:
        left = expr.left
        best = NONE
        for target in expr.comparisons:
            operator = target.operator
            if isinstance(operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)):
                left = target.comparator
                continue
            best = max(best, self.level(left, scope, depth + 1),
                       self.level(target.comparator, scope, depth + 1))
            left = target.comparator
        return best

    def name_level(self, name: str, scope: Scope, depth: int) -> int:
        bindings = self.reaching(scope, name)
        if not bindings:
            return NONE
        key = (id(bindings[0].scope), name, tuple(id(b.node) for b in bindings))
        if key in self._names:
            return self._names[key]
        self._names[key] = NONE  # recursion through `x = f(x)`
        result = NONE
        for binding in bindings:
            result = max(result, self.binding_level(binding, depth))
            if result == STRONG:
                break
        self._names[key] = result
        return result

    def binding_level(self, binding: Binding, depth: int) -> int:
        if binding.scope.kind in (ScopeKind.MODULE, ScopeKind.CLASS):
            return NONE  # module and class state are CKP201/204's business
        if binding.kind == BindingKind.PARAM:
            if binding.scope is self.function_scope and binding.name in self._params:
                return WEAK
            return NONE
        if binding.kind in ASSIGNED and binding.value is not None:
            previous, self._point = self._point, binding.node
            try:
                level = self.level(binding.value, binding.scope, depth + 1)
            finally:
                self._point = previous
            if isinstance(binding.node, cst.Assign) and any(
                    isinstance(t.target, (cst.Tuple, cst.List)) for t in binding.node.targets):
                # `a, b = ...`: an element of the value (an unpacked tensor result stays data).
                return min(level, WEAK)
            return level
        if binding.kind == BindingKind.AUGASSIGN:
            return NONE
        return NONE

    def reaching_at(self, scope: Scope, name: str, point: cst.CSTNode) -> list[Binding]:
        """The bindings of `name` that can reach `point`, a node of this function (`reaching`)."""
        previous, self._point = self._point, point
        try:
            return self.reaching(scope, name)
        finally:
            self._point = previous

    def reaching(self, scope: Scope, name: str) -> list[Binding]:
        """The bindings of `name` that can reach the current point: the last unconditional one
        that completes above it (`x = f(x)` does not reach its own `f(x)`) and any conditional
        ones after that, and those later in a loop that holds both. Without a point, or for a
        name of another scope: those live at the scope's end."""
        point = self._point
        bindings = scope.lookup(name, live=False)
        if point is None or any(b.scope is not self.function_scope for b in bindings):
            return live_bindings(bindings)
        order, ends = self.statement_order()
        read = order.get(id(point))
        if read is None:
            return live_bindings(bindings)
        index, loops = read
        above: list[Binding] = []
        carried: list[Binding] = []
        for binding in bindings:
            where = order.get(id(binding.node))
            if binding.kind == BindingKind.PARAM or where is None:
                above.append(binding)
            elif where[0] < index and (binding.kind == BindingKind.FOR
                                       or ends[id(binding.node)] <= index):
                above.append(binding)
            elif set(where[1]) & set(loops):
                carried.append(binding)
        return live_bindings(above) + carried

    def statement_order(self) -> tuple[dict[int, tuple[int, tuple[int, ...]]], dict[int, int]]:
        """For each node of the function: (its place in source order, the loops around it);
        and where each node's descendants end (`order_of_nodes`)."""
        if self._order is None:
            self._order = order_of_nodes(self.function_node)
        return self._order

    def call_level(self, call: cst.Call, scope: Scope, depth: int) -> int:
        func = call.func
        args = [arg.value for arg in call.args if arg.keyword is None]
        names = import_qualnames(func, scope)
        for name in names:
            if name.startswith("builtins."):
                short = name[len("builtins."):]
                if short in NOT_DATA_BUILTINS:
                    return NONE
                if short in VALUE_BUILTINS:
                    return max((self.level(a, scope, depth + 1) for a in args), default=NONE)
                return NONE
            if name.startswith("torch."):
                return torch_function_level(name)
            if name.startswith("math."):
                return max((self.level(a, scope, depth + 1) for a in args), default=NONE)
            if is_framework(name):
                return NONE
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in METADATA_METHODS:
                return NONE
            receiver = self.level(func.value, scope, depth + 1)
            if receiver == STRONG:
                return STRONG
            if method in ("item", "tolist", "any", "all"):
                if isinstance(func.value, cst.Attribute) \
                        and func.value.attr.value in METADATA_ATTRS:
                    return NONE
                return STRONG
            if receiver == WEAK and method in TENSOR_METHODS:
                return STRONG
            if self.is_torch_module_call(func, scope):
                return STRONG
            return NONE
        return NONE

    def is_torch_module_call(self, func: cst.Attribute, scope: Scope) -> bool:
        """`self.proj(x)` where `self.proj` is a `torch.nn` module built in setup."""
        cls = self.resolver.self_class(func.value, self.module, scope)
        if cls is None:
            return False
        if self.owner is not None:
            cls = self.owner
        built = assigned_constructors(self.resolver, cls, func.attr.value)
        return built is not None and all(
            any(n.startswith("torch.nn.") and n.rsplit(".", 1)[-1][:1].isupper() for n in names)
            for names in built)


class _NodeOrder(Visitor):
    def __init__(self) -> None:
        self.order: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.ends: dict[int, int] = {}
        self.loops: list[int] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.For, cst.While)):
            self.loops.append(id(node))
        self.order[id(node)] = (len(self.order), tuple(self.loops))
        return True

    def on_leave(self, node: cst.CSTNode) -> None:
        if isinstance(node, (cst.For, cst.While)):
            self.loops.pop()
        self.ends[id(node)] = len(self.order)


def order_of_nodes(function: cst.CSTNode) -> tuple[dict[int, tuple[int, tuple[int, ...]]],
                                                   dict[int, int]]:
    """Each node's place in source order and the ids of the loops around it (a loop's own
    test and body included); and for each node, the place just after its last descendant."""
    walker = _NodeOrder()
    walker.walk(function)
    return walker.order, walker.ends


# Namespaces whose functions compute tensors (anything else in torch is left unknown).
TENSOR_NAMESPACES = frozenset({"torch", "torch.nn.functional", "torch.linalg", "torch.fft",
                               "torch.special", "torch.Tensor"})


def torch_function_level(qualname: str) -> int:
    namespace, _, short = qualname.rpartition(".")
    if short in TORCH_PREDICATES and namespace in TENSOR_NAMESPACES:
        return STRONG
    if namespace not in TENSOR_NAMESPACES:
        return NONE
    if short in TORCH_NOT_DATA or short.startswith(("is_", "get_", "set_", "_")):
        return NONE
    if short[:1].isupper():
        return NONE  # classes: torch.Size, torch.Generator, torch.nn.Linear(...)
    return STRONG


def annotation_may_be_tensor(annotation: cst.BaseExpression) -> bool:
    text = cst.Module([]).code_for_node(annotation)
    if "Tensor" in text or "Any" in text:
        return True
    plain = ("int", "float", "bool", "str", "bytes", "dict", "list", "tuple", "set",
             "Dict", "List", "Tuple", "Set", "Callable", "Sequence", "Mapping", "Config",
             "PretrainedConfig")
    return not any(word in text for word in plain)
