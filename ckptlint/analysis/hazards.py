"""What a call or a read inside a segment means: randomness, devices, logging, outside state.

Recognised by qualified names through the file's imports (`import_qualnames`), so
`F.dropout`, `torch.nn.functional.dropout` and `from torch.nn.functional import dropout`
are the same thing, and nothing in a library is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import libcst as cst

from ckptlint.analysis.resolve import ClassInfo, Resolver
from ckptlint.analysis.scopes import BindingKind, Scope
from ckptlint.analysis.segment import import_qualnames

# -- randomness torch saves and restores (CKP302, CKP301) ---------------------------------------
TORCH_RANDOM_FUNCTIONS = frozenset({
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
    "bernoulli", "multinomial", "normal", "poisson", "dropout", "dropout1d", "dropout2d",
    "dropout3d", "alpha_dropout", "feature_alpha_dropout", "feature_dropout", "gumbel_softmax",
    "native_dropout", "fused_dropout", "rrelu", "rrelu_",
})
TORCH_RANDOM_METHODS = frozenset({
    "normal_", "uniform_", "bernoulli_", "bernoulli", "exponential_", "geometric_",
    "log_normal_", "cauchy_", "random_", "multinomial",
})
RANDOM_MODULES = frozenset({
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "RReLU", "DropPath", "DropBlock2d", "StochasticDepth",
})
RANDOM_MODULE_PACKAGES = ("torch.", "timm.", "torchvision.")

# -- randomness torch never restores (CKP303) --------------------------------------------------
PY_RANDOM_DRAWS = frozenset({
    "random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform",
    "gauss", "normalvariate", "lognormvariate", "expovariate", "betavariate", "gammavariate",
    "triangular", "vonmisesvariate", "paretovariate", "weibullvariate", "getrandbits",
    "randbytes", "binomialvariate",
})
NUMPY_RANDOM_DRAWS = PY_RANDOM_DRAWS | frozenset({
    "rand", "randn", "random_sample", "ranf", "permutation", "normal", "binomial", "poisson",
    "beta", "gamma", "exponential", "multinomial", "dirichlet", "integers", "standard_normal",
    "random_integers", "laplace", "logistic", "geometric", "bytes",
})
RNG_FACTORIES = frozenset({
    "random.Random", "numpy.random.default_rng", "numpy.random.RandomState",
    "numpy.random.Generator",
})

# -- outside state (CKP202): what each read gives (CKP202's rule words the kinds) -------------
EXTERNAL_READS = {
    "time.time": "wall-clock", "time.time_ns": "wall-clock",
    "time.perf_counter": "clock", "time.perf_counter_ns": "clock",
    "time.monotonic": "clock", "time.monotonic_ns": "clock",
    "time.process_time": "process-clock", "time.process_time_ns": "process-clock",
    "time.thread_time": "thread-clock", "time.localtime": "wall-clock",
    "time.gmtime": "wall-clock", "time.ctime": "wall-clock",
    "datetime.datetime.now": "wall-clock", "datetime.datetime.utcnow": "wall-clock",
    "datetime.datetime.today": "wall-clock", "datetime.date.today": "wall-clock",
    "os.environ": "environment", "os.getenv": "environment",
    "os.environ.get": "environment", "os.getpid": "process-id",
    "os.getppid": "process-id", "os.getcwd": "working-directory",
    "os.urandom": "entropy",
    "threading.current_thread": "thread", "threading.get_ident": "thread",
    "threading.get_native_id": "thread", "threading.active_count": "thread",
    "multiprocessing.current_process": "process", "socket.gethostname": "host-name",
    "uuid.uuid1": "clock-and-host", "uuid.uuid4": "entropy",
    "psutil.virtual_memory": "process", "resource.getrusage": "process",
}

# -- side effects (CKP401) ---------------------------------------------------------------------
# `debug` is left out: off by default, and a diagnostic the user turned on on purpose.
LOG_METHODS = frozenset({"info", "warning", "warn", "error", "exception", "critical",
                         "fatal", "log"})
LOGGER_FACTORIES = ("getLogger", "get_logger")


@dataclass(frozen=True)
class Draw:
    """Randomness a call draws. `rng` names what draws (a qualified function, `.method()`,
    a submodule `self.drop`, a generator expression); `how` says what kind of draw it is:
    "call", "dropout_p" (attention with dropout), "module" (a submodule built as `built`);
    never restored by checkpoint: "python", "numpy" (its global generator), "factory" (an
    unseeded generator made in place), "generator" (a `torch.Generator` passed in)."""

    rng: str
    how: str = "call"
    built: str | None = None

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"rng": self.rng, "draw": self.how}
        if self.built is not None:
            data["built"] = self.built
        return data


def short_name(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def literal_number(expr: cst.BaseExpression | None) -> float | None:
    if isinstance(expr, (cst.Integer, cst.Float)):
        return float(expr.evaluated_value)
    return None


def keyword(call: cst.Call, name: str, position: int | None = None) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    if position is not None:
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        if position < len(positional):
            return positional[position].value
    return None


def is_false(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def random_call(call: cst.Call, scope: Scope) -> Draw | None:
    """The torch randomness `call` draws (None when it draws none)."""
    func = call.func
    for name in sorted(import_qualnames(func, scope)):
        if not name.startswith("torch."):
            continue
        short = short_name(name)
        if short == "scaled_dot_product_attention":
            dropout_p = keyword(call, "dropout_p", 4)
            if dropout_p is None or literal_number(dropout_p) == 0.0:
                return None
            return Draw(name, "dropout_p")
        if short in TORCH_RANDOM_FUNCTIONS \
                and not name.startswith(("torch.cuda.", "torch.random.")):
            if "dropout" in short:
                p = literal_number(keyword(call, "p", 1))
                training = keyword(call, "training", 2)
                if training is None:
                    training = keyword(call, "train", 2)
                if (p is not None and p == 0.0) or is_false(training):
                    return None
                if short in ("alpha_dropout", "feature_alpha_dropout") and training is None:
                    return None  # these default to training=False
            if short.startswith("rrelu"):
                training = keyword(call, "training", 3)
                if not (isinstance(training, cst.BaseExpression) and not is_false(training)):
                    return None
            return Draw(name)
        if name.startswith("torch.nn.init.") and short.endswith("_") and short not in (
                "zeros_", "ones_", "constant_", "eye_", "dirac_"):
            return Draw(name)
    if isinstance(func, cst.Attribute) and func.attr.value in TORCH_RANDOM_METHODS:
        names = import_qualnames(func.value, scope)
        if names and not any(n.startswith("torch") for n in names):
            return None  # `np.random.normal`-style: CKP303's business
        if func.attr.value in ("bernoulli", "multinomial") and names:
            return None  # torch.bernoulli handled above
        return Draw(f".{func.attr.value}()")
    return None


def module_constructors(resolver: Resolver, cls: ClassInfo | None,
                        attr: str) -> list[tuple[str, cst.Call]]:
    """(qualified class name, constructor call) for each way `self.<attr>` is built."""
    if cls is None:
        return []
    assigned = resolver.attribute_assignments(cls).get(attr)
    if not assigned:
        for base in resolver.base_classes(cls):
            assigned = resolver.attribute_assignments(base).get(attr)
            if assigned:
                break
    found: list[tuple[str, cst.Call]] = []
    for value, scope in assigned or []:
        for expr in branches(value):
            if isinstance(expr, cst.Call):
                for name in import_qualnames(expr.func, scope):
                    if short_name(name) in RANDOM_MODULES \
                            and name.startswith(RANDOM_MODULE_PACKAGES):
                        p = literal_number(keyword(expr, "p", 0))
                        if p is not None and p == 0.0:
                            continue
                    found.append((name, expr))
    return found


def branches(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`a if c else b` -> [a, b]; anything else -> [expr]."""
    if isinstance(expr, cst.IfExp):
        return [*branches(expr.body), *branches(expr.orelse)]
    return [expr]


def called_submodule_constructors(
        resolver: Resolver, call: cst.Call, module, scope: Scope,
        owner: ClassInfo | None) -> tuple[str, list[tuple[str, cst.Call]]]:
    """For `self.<attr>(...)`: `attr` and how `self.<attr>` is built (see
    `module_constructors`)."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return "", []
    cls = resolver.self_class(func.value, module, scope)
    if cls is None:
        return "", []
    return func.attr.value, module_constructors(resolver, owner or cls, func.attr.value)


def random_module_call(resolver: Resolver, call: cst.Call, module, scope: Scope,
                       owner: ClassInfo | None) -> Draw | None:
    """`self.dropout(x)` where `self.dropout` is built as `nn.Dropout(p)` (p not 0)."""
    attribute, constructors = called_submodule_constructors(resolver, call, module, scope, owner)
    for name, constructor in constructors:
        if short_name(name) in RANDOM_MODULES and name.startswith(RANDOM_MODULE_PACKAGES):
            built = " ".join(cst.Module([]).code_for_node(constructor).split())
            if len(built) > 50:
                built = short_name(name) + "(...)"
            return Draw(f"self.{attribute}", "module", built)
    return None


NORM_WITH_RUNNING_STATS = frozenset({
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
    "LazyBatchNorm2d", "LazyBatchNorm3d",
})


def running_stats_call(resolver: Resolver, call: cst.Call, module, scope: Scope,
                       owner: ClassInfo | None) -> tuple[str, str] | None:
    """`self.bn(x)` where `self.bn` is a torch BatchNorm that tracks running statistics:
    (the attribute, `bn`, and the qualified class it is built as)."""
    attribute, constructors = called_submodule_constructors(resolver, call, module, scope, owner)
    for name, constructor in constructors:
        if short_name(name) in NORM_WITH_RUNNING_STATS and name.startswith("torch."):
            if is_false(keyword(constructor, "track_running_stats", 4)):
                continue
            momentum = keyword(constructor, "momentum", 2)
            if literal_number(momentum) == 0.0:
                continue
            return attribute, name
    return None


def foreign_random_call(call: cst.Call, scope: Scope) -> Draw | None:
    """Python `random`, NumPy random, or an unseeded RNG factory: never restored."""
    for name in sorted(import_qualnames(call.func, scope)):
        if name.startswith("random.") and name.count(".") == 1 \
                and short_name(name) in PY_RANDOM_DRAWS:
            return Draw(name, "python")
        if name.startswith("numpy.random.") and short_name(name) in NUMPY_RANDOM_DRAWS \
                and name.count(".") == 2:
            return Draw(name, "numpy")
        if name in RNG_FACTORIES and not call.args:
            return Draw(name, "factory")
    return None


def is_print(call: cst.Call, scope: Scope) -> bool:
    return "builtins.print" in import_qualnames(call.func, scope)


def log_call(call: cst.Call, scope: Scope) -> str | None:
    """`logger.warning(...)`, `logging.info(...)`: the call as written (`logger.warning`)."""
    func = call.func
    names = import_qualnames(func, scope)
    # `warnings.warn` is left out: the default filter shows a warning once per location, so
    # the replay's second call is invisible.
    if any(n.startswith("logging.") and short_name(n) in LOG_METHODS for n in names):
        return cst.Module([]).code_for_node(func)
    if not isinstance(func, cst.Attribute) or func.attr.value not in LOG_METHODS:
        return None
    receiver = func.value
    if isinstance(receiver, cst.Name):
        for binding in scope.lookup(receiver.value):
            value = binding.value
            if binding.kind == BindingKind.ASSIGN and isinstance(value, cst.Call):
                factory = value.func
                last = factory.attr.value if isinstance(factory, cst.Attribute) else (
                    factory.value if isinstance(factory, cst.Name) else "")
                if last in LOGGER_FACTORIES:
                    return f"{receiver.value}.{func.attr.value}"
    return None


# Calls that write outside the process: the replay writes again.
IO_CALLS = frozenset({
    "torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
    "json.dump", "pickle.dump", "sys.stdout.write", "sys.stderr.write",
})
WRITE_MODES = frozenset("wax+")


def io_call(call: cst.Call, scope: Scope) -> str | None:
    """`torch.save(...)`, `json.dump(...)`, `open(path, "w")`: the qualified name called."""
    names = import_qualnames(call.func, scope)
    for name in sorted(names):
        if name in IO_CALLS:
            return name
    if "builtins.open" in names:
        mode = keyword(call, "mode", 1)
        if isinstance(mode, cst.SimpleString) and isinstance(mode.evaluated_value, str) \
                and WRITE_MODES & set(mode.evaluated_value):
            return "builtins.open"
    return None


def external_read(expr: cst.BaseExpression, scope: Scope) -> str | None:
    """`time.time`, `os.environ`, ...: the outside state `expr` (a name or call func) reads."""
    found = sorted(name for name in import_qualnames(expr, scope) if name in EXTERNAL_READS)
    return found[0] if found else None
