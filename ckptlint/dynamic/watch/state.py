"""Reading the state a finding names (a global, `self.attr`, a container) around each pass.

A spec comes from the parent (`verdicts.build_plan`, from each finding's `data`): {"id",
"expr", "file", "cls", "targets": [[file, row], ...], "site": [file, row] | null, "line":
[file, row] | null, "branch": [file, row] | null}. `expr` is the finding's `data.state`, a
restricted expression: a name followed by attributes and constant subscripts (`SCALE`,
`self.cache`, `STATS["n"]`); `cls` is its `data.owner` (a qualified class) for `self.` state.
`line` is a side effect's line and `branch` a branch's line, for the line tracer.
Reading never calls properties or `__getitem__` of user classes: only plain attributes,
module attributes and built-in containers, so watching changes nothing.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import hashlib
import inspect
import os
import sys
import threading
import types
from typing import Any

import torch

from ckptlint.dynamic.join import target_keys
from ckptlint.dynamic.observations import UNREADABLE
from ckptlint.dynamic.watch.digest import digest, short
from ckptlint.dynamic.watch.observer import CheckpointCall

_MISSING = object()


def parse_expr(expr: str):
    """[root, step, ...] where a step is ("attr", name) or ("item", constant); None if not simple."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    steps = []
    while True:
        if isinstance(node, ast.Attribute):
            steps.append(("attr", node.attr))
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            steps.append(("item", node.slice.value))
            node = node.value
        elif isinstance(node, ast.Name):
            return [node.id] + steps[::-1]
        else:
            return None


def _get(obj, step):
    kind, key = step
    if kind == "attr":
        if isinstance(obj, torch.nn.Module):
            for store in ("_parameters", "_buffers", "_modules"):
                d = obj.__dict__.get(store) or {}
                if key in d:
                    return d[key]
        try:
            static = inspect.getattr_static(obj, key)
        except AttributeError:
            return _MISSING
        if isinstance(static, property) or hasattr(type(static), "__get__") and not callable(static):
            return _MISSING
        return static if not isinstance(static, (staticmethod, classmethod)) else _MISSING
    if isinstance(obj, (dict, list, tuple)):
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return _MISSING


# A container's summary covers its contents: at most this many values, this many levels deep,
# and tensors of at most this many elements in all (each read in full, before and after a pass).
CONTAINER_VALUES = 256
CONTAINER_DEPTH = 4
CONTAINER_TENSOR_ELEMENTS = 1 << 24
SHOWN = 60              # a summary longer than this shows a digest of its contents instead


class _Undigestable(Exception):
    """A value whose contents cannot be summarised in full (the reason is the message)."""


_POINTER = 8 if sys.maxsize > 2 ** 32 else 4
_DICT_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
_SEQUENCE_TYPES = (list, tuple, set, frozenset, collections.deque)


_SCALARS = (bool, int, float, complex, str, bytes)


def _scalar_repr(value) -> str:
    """The repr of None or a value of a built-in scalar type, by that type's own repr (a
    subclass's `__repr__` is user code)."""
    base = next((k for k in _SCALARS if issubclass(type(value), k)), None)
    return repr(value) if base is None else base.__repr__(value)


def _slots(cls) -> list[tuple[str, types.MemberDescriptorType]]:
    """The `__slots__` members of a class and the classes above it."""
    members = []
    for klass in reversed(cls.__mro__[:-1]):
        own = vars(klass)
        names = own.get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            slot = own.get(name)
            if isinstance(slot, types.MemberDescriptorType):
                members.append((name, slot))
    return members


def _instance_attributes(value) -> list[tuple[str, Any]] | None:
    """A plain object's attributes, (name, value) sorted by name: its `__dict__` and its
    `__slots__`, read from the instance's own storage through the C descriptors (no property,
    `__getattr__`, `__getattribute__` or other method of its class runs). None unless its
    instances are laid out as class statements on `object` make them (an object's header,
    the slots, a weakref and dict pointer, nothing else): a built-in or extension type, or a
    subclass of one, keeps state where these reads do not reach."""
    cls = type(value)
    slots = _slots(cls)
    own_pointers = len(slots) + (cls.__weakrefoffset__ > 0) + (cls.__dictoffset__ > 0)
    if cls.__itemsize__ or cls.__basicsize__ != object.__basicsize__ + _POINTER * own_pointers:
        return None
    found: dict[str, Any] = {}
    for name, slot in slots:
        with contextlib.suppress(AttributeError):       # an unset slot
            found[name] = slot.__get__(value, cls)
    for klass in cls.__mro__[:-1]:
        descriptor = vars(klass).get("__dict__")
        if descriptor is not None:
            if not isinstance(descriptor, types.GetSetDescriptorType):
                return None                 # a class that defines its own `__dict__`
            found.update(descriptor.__get__(value, cls))
            break
    return sorted(found.items(), key=lambda item: str(item[0]))


def _content(value, depth: int, budget: list[int], inside: set[int]) -> str:
    """The contents of a value as text that changes whenever they do: scalars by repr,
    tensors by their digest, built-in containers and plain objects (their attributes)
    recursively (dict keys, sets and attributes sorted). `budget`: [values, tensor elements]
    still to read; `inside`: ids of the containers and objects being read (a reference back
    to one of them reads `<cycle>`)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _Undigestable(f"more than {CONTAINER_VALUES} values")
    if value is None or issubclass(type(value), _SCALARS):
        return _scalar_repr(value)
    if issubclass(type(value), torch.Tensor):
        budget[1] -= value.numel()
        if budget[1] < 0:
            raise _Undigestable(f"tensors of more than {CONTAINER_TENSOR_ELEMENTS} elements")
        d = digest(value)
        if d is None:
            raise _Undigestable(f"holds a {type(value).__name__} that cannot be read")
        return f"tensor{list(value.shape)} {short(d)}"
    if type(value) in (torch.dtype, torch.device, torch.Size):
        return repr(value)
    if issubclass(type(value), torch.nn.Module):
        return summarize(value)     # by its buffers, as on its own
    is_container = type(value) in _DICT_TYPES + _SEQUENCE_TYPES
    attributes = None if is_container else _instance_attributes(value)
    if callable(value) and attributes is None:      # a function, method or class
        return f"<{type(value).__name__} {getattr(value, '__qualname__', '?')} at {id(value):#x}>"
    if id(value) in inside:
        return "<cycle>"
    if not is_container and attributes is None:
        # A built-in or extension object's state is not read (no methods of it are called).
        raise _Undigestable(f"holds a {type(value).__name__}, whose contents are not read")
    if depth >= CONTAINER_DEPTH:
        raise _Undigestable(f"nested more than {CONTAINER_DEPTH} levels")
    inside.add(id(value))
    try:
        return _nested_content(value, attributes, depth + 1, budget, inside)
    finally:
        inside.discard(id(value))


def _nested_content(value, attributes, depth, budget, inside) -> str:
    def read(item):
        return _content(item, depth, budget, inside)

    if attributes is not None:
        if len(attributes) > CONTAINER_VALUES:
            raise _Undigestable(f"more than {CONTAINER_VALUES} values")
        parts = ", ".join(f"{name}={read(item)}" for name, item in attributes)
        return f"{type(value).__name__}({parts})"
    if len(value) > CONTAINER_VALUES:
        raise _Undigestable(f"more than {CONTAINER_VALUES} values")
    if issubclass(type(value), dict):
        items = sorted(f"{read(k)}: {read(v)}" for k, v in list(value.items()))
        return "{" + ", ".join(items) + "}"
    parts = [read(v) for v in list(value)]
    if issubclass(type(value), (set, frozenset)):
        return "{" + ", ".join(sorted(parts)) + "}"
    if issubclass(type(value), tuple):
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return "[" + ", ".join(parts) + "]"


def contents_summary(value) -> str:
    """`list [0.5]`, `Config(scale=0.5)`, or `list of length N #digest` / `Config #digest`
    when the text is long; an unreadable summary naming why when the contents cannot all be
    read, so no comparison of it clears anything."""
    kind = type(value).__name__
    sized = type(value) in _DICT_TYPES + _SEQUENCE_TYPES
    try:
        text = _content(value, 0, [CONTAINER_VALUES + 1, CONTAINER_TENSOR_ELEMENTS], set())
    except _Undigestable as why:
        length = f" of length {len(value)}" if sized else ""
        return f"{UNREADABLE} {kind}{length}: {why}>"
    if len(text) <= SHOWN:
        return text if not sized else f"{kind} {text}"
    check = hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
    return f"{kind} of length {len(value)} #{check}" if sized else f"{kind} #{check}"


def summarize(value) -> str:
    if value is _MISSING:
        return f"{UNREADABLE}>"
    if callable(value) and not issubclass(type(value), torch.nn.Module) and \
            _instance_attributes(value) is None:
        return f"<{type(value).__name__}>"      # bound methods are new objects per access
    if value is None or issubclass(type(value), (bool, int, float, str, bytes)):
        text = _scalar_repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if issubclass(type(value), torch.Tensor):
        d = digest(value)
        shape = list(value.shape)
        return f"tensor{shape} {short(d)}" if d else f"tensor{shape}"
    if issubclass(type(value), torch.nn.Module):
        digests = [d for d in map(digest, value.buffers()) if d]
        if not digests:
            return f"<{type(value).__name__}>"
        total = [sum(d[0] for d in digests), sum(d[1] for d in digests)]
        return f"{type(value).__name__} buffers {short(total)}"
    return contents_summary(value)


class StateWatcher:
    def __init__(self, specs: list[dict[str, Any]]):
        self.specs = []
        for spec in specs:
            context = spec.get("context")
            path = parse_expr(spec["expr"]) if spec.get("expr") and not context else None
            line, branch = spec.get("line"), spec.get("branch")
            if path is None and not line and not branch and not context:
                continue
            spec = dict(spec)
            spec["_path"] = path
            spec["_line"] = (os.path.realpath(line[0]), int(line[1])) if line else None
            spec["_branch"] = (os.path.realpath(branch[0]), int(branch[1])) if branch else None
            spec["_targets"] = {(os.path.realpath(f), int(r)) for f, r in spec.get("targets") or ()}
            site = spec.get("site")
            spec["_site"] = (os.path.realpath(site[0]), int(site[1])) if site else None
            self.specs.append(spec)
        self._modules: dict[str, Any] = {}

    def specs_for(self, call: CheckpointCall) -> list[dict[str, Any]]:
        """The specs of findings whose site or target the call shares (a superset of what the
        parent will join the call to: reading a spec too many costs a snapshot, nothing more)."""
        if not self.specs:
            return []
        rows = target_keys(call.targets)
        site = (call.site[0], call.site[1]) if call.site else None
        return [s for s in self.specs if s["_targets"] & rows or (site and s["_site"] == site)]

    def _module_globals(self, filename: str, call: CheckpointCall):
        real = os.path.realpath(filename) if filename else ""
        cached = self._modules.get(real)
        if cached is not None:
            return cached
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if path and os.path.realpath(path) == real:
                self._modules[real] = module.__dict__
                return module.__dict__
        if real and os.path.realpath(sys.argv[0] or "") == real:
            main = sys.modules.get("__main__")
            if main is not None:
                self._modules[real] = main.__dict__
                return main.__dict__
        fn = call.fn
        while hasattr(fn, "func"):
            fn = fn.func
        fn = getattr(fn, "__func__", fn)
        return getattr(fn, "__globals__", {})

    def _self_for(self, spec, call: CheckpointCall):
        from ckptlint.dynamic.watch.torch_adapter import module_of
        module = module_of(call.fn)
        owner = module if module is not None else getattr(call.fn, "__self__", None)
        cls = (spec.get("cls") or "").split(".")[-1]
        if cls and isinstance(module, torch.nn.Module):
            for sub in module.modules():
                if type(sub).__name__ == cls:
                    return sub
        return owner

    def read(self, spec, call: CheckpointCall):
        path = spec["_path"]
        root = path[0]
        if root == "self":
            value = self._self_for(spec, call)
            if value is None:
                return _MISSING
        else:
            value = self._module_globals(spec.get("file", ""), call).get(root, _MISSING)
        for step in path[1:]:
            if value is _MISSING:
                break
            value = _get(value, step)
        return value

    def context_state(self, spec, call: CheckpointCall) -> str:
        """What a context torch does not replay (CKP206, `spec["context"]`) has set now: the
        global a project context manager assigns, else the kernel and precision switches."""
        name, global_name = spec["context"], spec.get("global")
        if global_name:
            module = sys.modules.get(name.rsplit(".", 1)[0])
            namespace = (module.__dict__ if module is not None
                         else self._module_globals(spec.get("file", ""), call))
            return summarize(namespace.get(global_name, _MISSING))
        return kernel_state(name)

    def snapshot(self, call: CheckpointCall, specs) -> dict[str, str]:
        out = {}
        for spec in specs:
            if spec.get("_path") is None and not spec.get("context"):
                continue
            try:
                out[str(spec["id"])] = (self.context_state(spec, call) if spec.get("context")
                                        else summarize(self.read(spec, call)))
            except Exception:
                out[str(spec["id"])] = f"{UNREADABLE}>"
        return out


SDPA_CONTEXTS = ("torch.nn.attention.sdpa_kernel", "torch.backends.cuda.sdp_kernel")
SDPA_BACKENDS = ("flash", "mem_efficient", "math", "cudnn")


def kernel_state(context: str) -> str:
    """The switches `context` sets, as text: the SDPA backends enabled, a backend's flags
    (`torch.backends.X.flags`), the default dtype, TransformerEngine's FP8 switch; all of the
    torch ones for a project context manager that sets one of them."""
    if context in SDPA_CONTEXTS:
        return sdpa_state()
    if context.startswith("torch.backends.") and context.endswith(".flags"):
        return backend_flags(context.rsplit(".", 1)[0])
    if context == "torch.set_default_dtype":
        return str(torch.get_default_dtype())
    if context.startswith("transformer_engine."):
        try:
            from transformer_engine.pytorch.fp8 import FP8GlobalStateManager
            return f"fp8 enabled={FP8GlobalStateManager.is_fp8_enabled()}"
        except Exception:
            return f"{UNREADABLE}>"
    return "; ".join((sdpa_state(), f"default dtype {torch.get_default_dtype()}",
                      backend_flags("torch.backends.cudnn"), backend_flags("torch.backends.mkldnn")))


def sdpa_state() -> str:
    cuda = torch.backends.cuda
    return "sdpa " + ", ".join(f"{name}={getattr(cuda, f'{name}_sdp_enabled')()}"
                               for name in SDPA_BACKENDS if hasattr(cuda, f"{name}_sdp_enabled"))


def backend_flags(module_name: str) -> str:
    """The values of the switches a backend's `flags(...)` takes, read from the backend."""
    module = sys.modules.get(module_name)
    flags = getattr(module, "flags", None)
    if module is None or flags is None:
        return f"{module_name} {UNREADABLE}>"
    try:
        names = list(inspect.signature(flags).parameters)
    except (TypeError, ValueError):
        return f"{module_name} {UNREADABLE}>"
    values = []
    for name in names:
        try:
            values.append(f"{name}={getattr(module, name)!r}")
        except Exception:
            continue
    return f"{module_name.rsplit('.', 1)[-1]} " + ", ".join(values)


class LineTracer:
    """Watches given source lines during one pass (sys.settrace, this thread, and only frames
    of the files that hold them: other code runs untraced).

    - side-effect lines: how often each ran (`hits`). A line that runs in the forward and
      again in the replay is a side effect that happens twice.
    - branch lines (an `if`/`while` whose arms start on other lines): the line its frame went
      to next, each time it ran (`arms`). A replay that goes elsewhere took the other way.

    Stays off when another tracer (a debugger, coverage) is installed, so it never displaces
    it."""

    MAX_ARMS = 64

    def __init__(self, specs):
        self.lines: dict[tuple[str, int], list[str]] = {}
        self.branches: dict[tuple[str, int], list[str]] = {}
        for spec in specs:
            if spec.get("_line"):
                self.lines.setdefault(spec["_line"], []).append(str(spec["id"]))
            if spec.get("_branch"):
                self.branches.setdefault(spec["_branch"], []).append(str(spec["id"]))
        self.files = {f for f, _ in self.lines} | {f for f, _ in self.branches}
        self.hits: dict[str, int] = {}
        self.arms: dict[str, list[int]] = {}
        self.active = False
        self._paused = False
        self._thread: int | None = None
        # co_filename -> its realpath when it is a file of interest, else None
        self._real: dict[str, str | None] = {}

    @property
    def wanted(self) -> bool:
        return bool(self.lines or self.branches)

    def _global(self, frame, event, arg):
        # Called for every Python call during the pass: one dict lookup for code elsewhere.
        if event != "call":
            return None
        name = frame.f_code.co_filename
        filename = self._real.get(name, "")
        if filename == "":
            real = os.path.realpath(name)
            filename = self._real[name] = real if real in self.files else None
        if filename is None:
            return None
        lines, branches, hits, arms = self.lines, self.branches, self.hits, self.arms
        after_branch = [None]     # the branch line this frame just ran, awaiting the next

        def local(frame, event, arg):
            if event != "line":
                return local
            row = frame.f_lineno
            pending = after_branch[0]
            if pending is not None and row != pending:
                after_branch[0] = None
                for spec_id in branches[(filename, pending)]:
                    went = arms.setdefault(spec_id, [])
                    if len(went) < self.MAX_ARMS:
                        went.append(row)
            key = (filename, row)
            ids = lines.get(key)
            if ids:
                for spec_id in ids:
                    hits[spec_id] = hits.get(spec_id, 0) + 1
            if key in branches:
                after_branch[0] = row
            return local

        return local

    def __enter__(self):
        if self.wanted and sys.gettrace() is None:
            self.active = True
            self._thread = threading.get_ident()
            for spec_id in {i for ids in self.lines.values() for i in ids}:
                self.hits[spec_id] = 0
            sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        if self.active:
            sys.settrace(None)
            self.active = False
        return False

    def pause(self) -> bool:
        """Stop tracing while ckptlint's own code runs (an op's dispatch); True if this call
        paused it. Only in the thread it traces, and only once when dispatches nest."""
        if self.active and not self._paused and threading.get_ident() == self._thread:
            sys.settrace(None)
            self._paused = True
            return True
        return False

    def resume(self) -> None:
        """Undoes a pause that returned True (unless the pass ended meanwhile)."""
        self._paused = False
        if self.active:
            sys.settrace(self._global)
