"""The facts of a state finding (CKP201, CKP204, CKP401) as its `data` carries them.

`state` is the expression as the segment reads it (`SCALE`, `self.gate`); `owner` and
`attribute` name the binding that changes (a module global: the module and the name; an
instance or class attribute: the class and the attribute); `changes` lists where it changes,
each with the phase it runs in (`ckptlint.analysis.phases`), why (`because`) and the function
that decides it (`via`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libcst as cst

from ckptlint.analysis.bindings import Change, ChangeHow
from ckptlint.analysis.phases import Because, Phase, When, function_key
from ckptlint.analysis.project import Project
from ckptlint.analysis.segment import Reached, Segment
from ckptlint.syntax.source import SourceModule


@dataclass(frozen=True)
class StateRead:
    """Mutable state that a segment reads, and where it changes."""

    state: str
    owner: str
    attribute: str
    changes: list[Change]


@dataclass(frozen=True)
class StateHazard:
    """A state read with the changes that can make the replay see another value, each with
    the phase it runs in."""

    read: StateRead
    changes: list[tuple[Change, When]]

    def data(self) -> dict[str, Any]:
        read = self.read
        return {"state": read.state, "owner": read.owner, "attribute": read.attribute,
                "changes": changes_data(self.changes)}


def qualified(module: SourceModule, name: str = "") -> str:
    """`pkg.mod` or `pkg.mod.Class`: a name of `module` qualified by the module's own name
    (its file name when the module's import name is unknown)."""
    base = module.name or Path(module.display).stem
    return f"{base}.{name}" if name else base


def source_text(module: SourceModule, node: cst.CSTNode) -> str:
    """The source of `node` on one line (whitespace collapsed)."""
    return " ".join(module.code(node).split())


def in_segment(segment: Segment, change: Change, project: Project) -> bool:
    """Whether the change is made by a function of the segment."""
    return (function_key(change.where), project.real_path(change.path)) in segment.places


def changes_data(changes: list[tuple[Change, When]]) -> list[dict[str, Any]]:
    """Each change as data, in (file, row) order."""
    ordered = sorted(changes, key=lambda pair: (pair[0].display, pair[0].row))
    return [change_fact(change.display, change.row, change.how, change.where, when)
            for change, when in ordered]


def change_fact(display: str, row: int, how: ChangeHow, function: str,
                when: When) -> dict[str, Any]:
    return {"filename": display, "row": row, "function": function or None,
            "phase": when.phase.value, "how": how.value, "because": when.because.value,
            "via": when.via}


def segment_change(reached: Reached, node: cst.CSTNode, how: ChangeHow) -> dict[str, Any]:
    """A change the segment itself makes (CKP401's hazard)."""
    function = reached.function.qualname
    return change_fact(reached.module.display, reached.module.start(node).row, how, function,
                       When(Phase.SEGMENT, Because.SEGMENT, function))
