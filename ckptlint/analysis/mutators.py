"""Methods that change their receiver in place (containers and tensors): read by the libcst
analysis, the `ast` summaries and the text scans alike. It imports nothing, so a process that
only scans texts need not import libcst for it."""

from __future__ import annotations

CONTAINER_MUTATORS = frozenset({
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault",
    "add", "discard", "appendleft", "extendleft", "popleft", "sort", "reverse", "put",
    "put_nowait", "__setitem__", "__delitem__",
})
TENSOR_NOT_MUTATING_UNDERSCORE = frozenset({"requires_grad_"})


def is_mutator(method: str) -> bool:
    """`append`/`update`/... and in-place tensor ops (`add_`, `copy_`, `zero_`, ...)."""
    if method in CONTAINER_MUTATORS:
        return True
    return (method.endswith("_") and not method.startswith("_") and len(method) > 1
            and method not in TENSOR_NOT_MUTATING_UNDERSCORE)
