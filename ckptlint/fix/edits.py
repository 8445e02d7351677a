"""Building fix edits: text insertions computed from node positions."""

from __future__ import annotations

import libcst as cst

from ckptlint.findings import Edit, Fix
from ckptlint.syntax.source import SourceModule


def add_keyword(module: SourceModule, call: cst.Call, keyword_text: str, message: str,
                applicability: str = "unsafe") -> Fix | None:
    """Append `keyword_text` (e.g. `use_reentrant=False`) as the call's last argument.

    None when the call has a `**` argument, which may already carry the keyword. A call
    without arguments (`model.gradient_checkpointing_enable()`) gets the keyword just before
    its closing parenthesis.
    """
    if any(arg.star == "**" for arg in call.args):
        return None
    if not call.args:
        if call.lpar:
            return None  # `(f())`: the span would end after the outer parenthesis
        end = module.span(call)[1]
        before_paren = type(end)(end.row, end.column - 1)
        return Fix(applicability, message, (Edit(keyword_text, before_paren, before_paren),))
    last = call.args[-1].value
    end = module.span(last)[1]
    return Fix(applicability, message, (Edit(f", {keyword_text}", end, end),))


def add_dict_entry(module: SourceModule, mapping: cst.Dict, entry_text: str, message: str,
                   applicability: str = "unsafe") -> Fix | None:
    """Insert `entry_text` (e.g. `"use_reentrant": False`) first in a dict literal."""
    if any(isinstance(element, cst.StarredDictElement) for element in mapping.elements):
        return None
    start = module.span(mapping)[0]
    position = type(start)(start.row, start.column + 1)
    text = entry_text if not mapping.elements else f"{entry_text}, "
    return Fix(applicability, message, (Edit(text, position, position),))
