"""Dotted module names (no libcst: the text and `ast` confirmation use this too)."""

from __future__ import annotations


def resolve_relative(module_name: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute dotted name of `from <level dots><target> import ...` in `module_name`."""
    parts = module_name.split(".") if module_name else []
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)] if level - 1 <= len(parts) else []
    if target:
        parts.append(target)
    return ".".join(parts)
