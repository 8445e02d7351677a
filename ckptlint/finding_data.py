"""Shapes of finding `data`: the contract its readers rely on.

Each code's shape is the `data` of its entry in `ckptlint.registry`. `Finding.from_json`
checks data read back from a cache or a `--findings` file against it (ShapeError on a field
of the wrong type); the JSON Schema of the JSON output (`docs/schema/findings.schema.json`) is
generated from the same shapes (`python scripts/findings_schema.py`). Objects may carry more
fields than listed: fields are added, never removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptlint.analysis.apis import SITE_MODES
from ckptlint.storage.plain_data import MAX_INT, ShapeError


class Shape:
    def check(self, value: Any, what: str) -> None:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Scalar(Shape):
    kind: type[Any]  # str, int or bool

    def check(self, value: Any, what: str) -> None:
        if type(value) is not self.kind or (self.kind is int and not 1 <= value <= MAX_INT):
            raise ShapeError(f"{what}: expected {SCALAR_NAMES[self.kind]}")

    def schema(self) -> dict[str, Any]:
        if self.kind is int:
            return {"type": "integer", "minimum": 1}
        return {"type": SCALAR_NAMES[self.kind]}


SCALAR_NAMES = {str: "string", int: "integer", bool: "boolean"}


@dataclass(frozen=True)
class OneOf(Shape):
    """One of a few strings."""

    values: tuple[str, ...]

    def check(self, value: Any, what: str) -> None:
        if type(value) is not str or value not in self.values:
            raise ShapeError(f"{what}: expected one of {', '.join(self.values)}")

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


@dataclass(frozen=True)
class Nullable(Shape):
    inner: Shape

    def check(self, value: Any, what: str) -> None:
        if value is not None:
            self.inner.check(value, what)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [self.inner.schema(), {"type": "null"}]}


@dataclass(frozen=True)
class ListOf(Shape):
    item: Shape

    def check(self, value: Any, what: str) -> None:
        if type(value) is not list:
            raise ShapeError(f"{what}: expected a list")
        for item in value:
            self.item.check(item, what)

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema()}


@dataclass(frozen=True)
class Obj(Shape):
    """An object with these fields (`optional` ones may be missing; others may be added)."""

    required: dict[str, Shape]
    optional: dict[str, Shape] = field(default_factory=dict)

    def check(self, value: Any, what: str) -> None:
        if type(value) is not dict:
            raise ShapeError(f"{what}: expected an object")
        for key, shape in self.required.items():
            if key not in value:
                raise ShapeError(f"{what}.{key}: missing")
            shape.check(value[key], f"{what}.{key}")
        for key, shape in self.optional.items():
            if key in value:
                shape.check(value[key], f"{what}.{key}")

    def with_fields(self, required: dict[str, Shape] | None = None,
                    optional: dict[str, Shape] | None = None) -> Obj:
        return Obj({**self.required, **(required or {})}, {**self.optional, **(optional or {})})

    def schema(self) -> dict[str, Any]:
        properties = {key: shape.schema() for key, shape in {**self.required,
                                                             **self.optional}.items()}
        return {"type": "object", "required": list(self.required), "properties": properties}


STR, INT, BOOL = Scalar(str), Scalar(int), Scalar(bool)
PLACE = Obj({"filename": STR, "row": INT})
MODE = OneOf(tuple(mode.value for mode in SITE_MODES))
PHASE = OneOf(("segment", "forward", "backward-hook", "step", "configuration"))
BECAUSE = OneOf(("segment", "forward", "forward-hook", "backward-hook", "training", "uncalled",
                 "entry-point", "setup", "setter", "between-steps", "module-level"))
CHANGE = Obj({"filename": STR, "row": INT, "function": Nullable(STR), "phase": PHASE,
              "how": STR}, {"because": BECAUSE, "via": Nullable(STR)})

# CKP1xx: the checkpoint call itself.
CALL = Obj({"api": STR, "mode": MODE})
# CKP2xx-4xx: a hazard inside checkpointed code; `hazard` is where it is when the finding is
# reported at its site because the hazard's file was not linted.
SEGMENT = Obj({}, {"hazard": PLACE})
STATE = SEGMENT.with_fields({"state": STR, "owner": STR, "attribute": STR,
                             "changes": ListOf(CHANGE)})
TORCH_DRAW = OneOf(("call", "dropout_p", "module"))
