"""Findings, their locations and fixes: the data every stage after the rules passes along.

Each type reads itself back from what its `to_json` wrote (`from_json`), checking every field:
the data may come from a cache or a file that the linted tree supplied, so a wrong type or
shape raises `ShapeError` (a ValueError) and never yields a half-valid object.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ckptlint.registry import RULES, rule_info
from ckptlint.storage.plain_data import (
    MAX_INT,
    ShapeError,
    member,
    want_dict,
    want_int,
    want_list,
    want_optional_str,
    want_plain,
    want_str,
    want_strs,
)


@dataclass(frozen=True, order=True)
class Position:
    """A 1-based row and column (columns count characters, as ruff and flake8 do)."""

    row: int
    column: int

    def to_json(self) -> dict[str, int]:
        return {"row": self.row, "column": self.column}

    @classmethod
    def from_json(cls, data: Any) -> Position:
        return cls(want_int(member(data, "row"), "row", 1, MAX_INT),
                   want_int(member(data, "column"), "column", 1, MAX_INT))


@dataclass(frozen=True)
class SiteRef:
    """Where the checkpointing expression that a finding belongs to stands."""

    filename: str
    row: int
    column: int
    cell: int | None = None  # in a notebook: the cell (1-based), `row` counting in it

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"filename": self.filename, "row": self.row,
                                "column": self.column}
        if self.cell is not None:
            data["cell"] = self.cell
        return data

    @classmethod
    def from_json(cls, data: Any) -> SiteRef:
        position = Position.from_json(data)
        cell = data.get("cell")
        return cls(want_str(member(data, "filename"), "filename"), position.row, position.column,
                   None if cell is None else want_int(cell, "cell", 1, MAX_INT))

    def describe(self) -> str:
        return (f"{self.filename}:cell {self.cell}:{self.row}" if self.cell is not None
                else f"{self.filename}:{self.row}")


@dataclass(frozen=True)
class Edit:
    content: str
    start: Position
    end: Position

    def to_json(self) -> dict[str, Any]:
        return {"content": self.content, "location": self.start.to_json(),
                "end_location": self.end.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> Edit:
        return cls(want_str(member(data, "content"), "content"),
                   Position.from_json(member(data, "location")),
                   Position.from_json(member(data, "end_location")))


@dataclass(frozen=True)
class Fix:
    applicability: str  # "safe" | "unsafe"
    message: str
    edits: tuple[Edit, ...]

    def to_json(self) -> dict[str, Any]:
        return {"applicability": self.applicability, "message": self.message,
                "edits": [edit.to_json() for edit in self.edits]}

    @classmethod
    def from_json(cls, data: Any) -> Fix:
        applicability = member(data, "applicability")
        if applicability not in ("safe", "unsafe"):
            raise ShapeError("applicability: expected \"safe\" or \"unsafe\"")
        edits = want_list(member(data, "edits"), "edits")
        return cls(applicability, want_str(member(data, "message"), "message"),
                   tuple(Edit.from_json(edit) for edit in edits))


@dataclass(frozen=True)
class TargetRef:
    """The checkpointed function: its file and the first line of its code object.

    Dynamic mode joins runtime observations to findings through it, because wrappers
    (checkpoint_wrapper, checkpoint_sequential, transformers layers) call checkpoint from
    library code where the call site says nothing about the user's code.
    """

    filename: str
    row: int
    qualname: str

    def to_json(self) -> dict[str, Any]:
        return {"filename": self.filename, "row": self.row, "qualname": self.qualname}

    @classmethod
    def from_json(cls, data: Any) -> TargetRef:
        return cls(want_str(member(data, "filename"), "filename"),
                   want_int(member(data, "row"), "row", 1, MAX_INT),
                   want_str(member(data, "qualname"), "qualname"))


@dataclass(frozen=True)
class Finding:
    """One finding. `data` holds the facts its message was rendered from (JSON values; the
    fields of each code are on its rule page): whatever acts on a finding reads `data`,
    never `message`, which is for people and may be reworded."""

    code: str
    message: str
    filename: str
    start: Position
    end: Position
    site: SiteRef | None = None
    chain: tuple[str, ...] = ()
    fix: Fix | None = None
    target: TargetRef | None = None
    data: dict[str, Any] = field(default_factory=dict, hash=False)
    # Dynamic mode only.
    verdict: str | None = None
    evidence: str | None = None
    # In a notebook, once reported: the cell (1-based among all cells); rows count in it.
    cell: int | None = None

    @property
    def name(self) -> str:
        return rule_info(self.code).name

    @property
    def severity(self) -> str:
        return rule_info(self.code).severity

    @property
    def place(self) -> str:
        """`path:row:col`, or `nb.ipynb:cell 3:row:col` in a notebook."""
        cell = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{self.filename}:{cell}{self.start.row}:{self.start.column}"

    @property
    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.filename, self.start.row, self.start.column, self.code)

    def with_verdict(self, verdict: str, evidence: str) -> Finding:
        return replace(self, verdict=verdict, evidence=evidence)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "severity": self.severity,
            "filename": self.filename,
            "location": self.start.to_json(),
            "end_location": self.end.to_json(),
            "site": self.site.to_json() if self.site else None,
            "chain": list(self.chain),
            "fix": self.fix.to_json() if self.fix else None,
            "data": self.data,
            "target": self.target.to_json() if self.target else None,
        }
        if self.cell is not None:
            data["cell"] = self.cell
        if self.verdict is not None:
            data["verdict"] = self.verdict
            data["evidence"] = self.evidence
        return data

    @classmethod
    def from_json(cls, data: Any) -> Finding:
        """A finding as `to_json` wrote it (`name` and `severity` follow from the code)."""
        want_dict(data, "finding")
        code = want_str(member(data, "code"), "code")
        if code not in RULES:
            raise ShapeError("code: expected a ckptlint rule code")
        site, fix, target = data.get("site"), data.get("fix"), data.get("target")
        return cls(
            code=code,
            message=want_str(member(data, "message"), "message"),
            filename=want_str(member(data, "filename"), "filename"),
            start=Position.from_json(member(data, "location")),
            end=Position.from_json(member(data, "end_location")),
            site=SiteRef.from_json(site) if site is not None else None,
            chain=want_strs(data.get("chain", []), "chain"),
            fix=Fix.from_json(fix) if fix is not None else None,
            target=TargetRef.from_json(target) if target is not None else None,
            data=finding_data(code, member(data, "data")),
            verdict=want_optional_str(data.get("verdict"), "verdict"),
            evidence=want_optional_str(data.get("evidence"), "evidence"),
            cell=(None if data.get("cell") is None
                  else want_int(data["cell"], "cell", 1, MAX_INT)),
        )


def finding_data(code: str, data: Any) -> dict[str, Any]:
    """A finding's `data` as read back: JSON values with the fields of `code`'s findings."""
    want_plain(data, "data")
    rule_info(code).data.check(data, "data")
    return data


@dataclass(frozen=True)
class SiteRecord:
    """A checkpoint site found in a linted file (dynamic mode joins runtime calls to these)."""

    site: SiteRef
    targets: tuple[TargetRef, ...]
    api: str
    mode: str

    def to_json(self) -> dict:
        return {"site": self.site.to_json(), "targets": [t.to_json() for t in self.targets],
                "api": self.api, "mode": self.mode}

    @classmethod
    def from_json(cls, data) -> SiteRecord:
        """What `to_json` wrote, every field checked (ShapeError otherwise)."""
        from ckptlint.storage.plain_data import member, want_list, want_str

        return cls(SiteRef.from_json(member(data, "site")),
                   tuple(TargetRef.from_json(t) for t in want_list(member(data, "targets"),
                                                                   "targets")),
                   want_str(member(data, "api"), "api"), want_str(member(data, "mode"), "mode"))
