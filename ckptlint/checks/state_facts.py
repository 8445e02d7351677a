"""The facts of a state finding (CKP201, CKP204, CKP401) as its `data` carries them.

`state` is the expression as the segment reads it (`SCALE`, `self.gate`); `owner` and
`attribute` name the binding that changes (a module global: the module and the name; an
instance or class attribute: the class and the attribute); `changes` lists where it changes,
each with the phase it runs in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst

from ckptlint.analysis.bindings import SETUP_METHODS, Change, ChangeHow
from ckptlint.analysis.segment import Reached, Segment
from ckptlint.syntax.source import SourceModule

# Phases a change can run in; the binding model tells today only these apart.
SEGMENT, FORWARD, CONFIGURATION = "segment", "forward", "configuration"


@dataclass(frozen=True)
class StateRead:
    """Mutable state that a segment reads, and where it changes."""

    state: str
    owner: str
    attribute: str
    changes: list[Change]

    def data(self, segment: Segment) -> dict[str, Any]:
        return {"state": self.state, "owner": self.owner, "attribute": self.attribute,
                "changes": changes_data(segment, self.changes)}


def qualified(module: SourceModule, name: str = "") -> str:
    """`pkg.mod` or `pkg.mod.Class`: a name of `module` qualified by the module's own name
    (its file name when the module's import name is unknown)."""
    base = module.name or Path(module.display).stem
    return f"{base}.{name}" if name else base


def source_text(module: SourceModule, node: cst.CSTNode) -> str:
    """The source of `node` on one line (whitespace collapsed)."""
    return " ".join(module.code(node).split())


def changes_data(segment: Segment, changes: list[Change]) -> list[dict[str, Any]]:
    """Each change as data, in (file, row) order, with its phase: inside the segment, in
    setup (`__init__` and friends), else any other run-time code (reported as forward)."""
    inside = {(reached.module.path, reached.function.qualname) for reached in segment.functions}
    ordered = sorted(changes, key=lambda change: (change.module.display, change.row))
    return [change_fact(change.module, change.node, change.how, change.where,
                        phase_of(change, inside)) for change in ordered]


def phase_of(change: Change, inside: set[tuple[Path, str]]) -> str:
    if (change.module.path, change.where) in inside:
        return SEGMENT
    if change.where.rsplit(".", 1)[-1] in SETUP_METHODS:
        return CONFIGURATION
    return FORWARD


def change_fact(module: SourceModule, node: cst.CSTNode, how: ChangeHow, function: str,
                phase: str) -> dict[str, Any]:
    return {"filename": module.display, "row": module.start(node).row,
            "function": function or None, "phase": phase, "how": how.value}


def segment_change(reached: Reached, node: cst.CSTNode, how: ChangeHow) -> dict[str, Any]:
    """A change the segment itself makes (CKP401's hazard)."""
    return change_fact(reached.module, node, how, reached.function.qualname, SEGMENT)
