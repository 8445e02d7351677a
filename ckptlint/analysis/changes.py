"""How a statement changes state: shared by the binding model (libcst) and the project's
`ast` summaries (`ckptlint.analysis.callgraph`)."""

from __future__ import annotations

from ckptlint.enums import TextEnum


class ChangeHow(TextEnum):
    """How a statement changes state (findings carry it as `changes[].how`)."""

    REBOUND = "rebound"  # a module-level name assigned
    REASSIGNED = "reassigned"  # an attribute assigned
    MUTATED = "mutated in place"  # an item, an attribute below or a mutating method
    AUGMENTED = "changed by augmented assignment"  # a module-level name's `+=`
    UPDATED = "updated in place"  # an attribute's `+=`
    DELETED = "deleted"
    CALLED = "called"  # a print or log call (CKP401's output, never recorded here)


# Changes that add to the old value rather than replace it.
ACCUMULATING = frozenset({ChangeHow.MUTATED, ChangeHow.AUGMENTED, ChangeHow.UPDATED})
