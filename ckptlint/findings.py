"""Findings, their locations and fixes: the data every stage after the rules passes along."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ckptlint.catalogue import rule_info


@dataclass(frozen=True, order=True)
class Position:
    """A 1-based row and column (columns count characters, as ruff and flake8 do)."""

    row: int
    column: int

    def to_json(self) -> dict[str, int]:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class SiteRef:
    """Where the checkpointing expression that a finding belongs to stands."""

    filename: str
    row: int
    column: int

    def to_json(self) -> dict[str, Any]:
        return {"filename": self.filename, "row": self.row, "column": self.column}

    def describe(self) -> str:
        return f"{self.filename}:{self.row}"


@dataclass(frozen=True)
class Edit:
    content: str
    start: Position
    end: Position

    def to_json(self) -> dict[str, Any]:
        return {"content": self.content, "location": self.start.to_json(),
                "end_location": self.end.to_json()}


@dataclass(frozen=True)
class Fix:
    applicability: str  # "safe" | "unsafe"
    message: str
    edits: tuple[Edit, ...]

    def to_json(self) -> dict[str, Any]:
        return {"applicability": self.applicability, "message": self.message,
                "edits": [edit.to_json() for edit in self.edits]}


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


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    filename: str
    start: Position
    end: Position
    site: SiteRef | None = None
    chain: tuple[str, ...] = ()
    fix: Fix | None = None
    target: TargetRef | None = None
    # Dynamic mode only.
    verdict: str | None = None
    evidence: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return rule_info(self.code).name

    @property
    def severity(self) -> str:
        return rule_info(self.code).severity

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
            "target": self.target.to_json() if self.target else None,
        }
        if self.verdict is not None:
            data["verdict"] = self.verdict
            data["evidence"] = self.evidence
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        fix = data.get("fix")
        site = data.get("site")
        target = data.get("target")
        return cls(
            code=data["code"],
            message=data["message"],
            filename=data["filename"],
            start=Position(**data["location"]),
            end=Position(**data["end_location"]),
            site=SiteRef(**site) if site else None,
            chain=tuple(data.get("chain") or ()),
            fix=Fix(
                applicability=fix["applicability"],
                message=fix["message"],
                edits=tuple(
                    Edit(e["content"], Position(**e["location"]), Position(**e["end_location"]))
                    for e in fix["edits"]
                ),
            ) if fix else None,
            target=TargetRef(**target) if target else None,
            verdict=data.get("verdict"),
            evidence=data.get("evidence"),
        )
