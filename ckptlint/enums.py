"""The base of ckptlint's kinds (scope, binding, site, mode, ...)."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """An enum whose members are their own text: they compare, hash, format and serialise to
    JSON as their value, so output built from them reads the same as from plain strings."""

    def __str__(self) -> str:
        return str(self.value)
