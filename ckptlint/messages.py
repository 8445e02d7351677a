"""Messages rendered from a finding's data: the only place wording meets facts.

A rule declares its wording as class attributes, `message` (a template) and `phrases` (the
wording of a field's values), and creates findings with `data` only; the message is
`render(message, data, phrases)`. Findings made outside rules (CKP501, CKP902, CKP999) word
them with module-level `*_MESSAGE` templates, and tables shared by rules are `*_PHRASES`.
Dynamic mode, profile and every integration read `data`, never the message, so rewording a
template changes no verdict (tests/dynamic/test_wording.py rewords every template named
this way and checks that).

A template is `str.format` syntax over the data's top-level fields (`{{`/`}}` for braces):
`{name}` is the value as text; `{name:FORMAT}` formats it:

    short   source text: whitespace collapsed, cut to 60 characters
    last    the last dotted part (`checkpoint` for `torch.utils.checkpoint.checkpoint`)
    ticks   a list as "`a`, `b`"
    join    a list as "a, b"
    at      a {"filename", "row"} object as "file:row"
    places  a list of changes ({"how", "filename", "row", "function"}) as
            "rebound at f.py:20 in `step` (and 2 other places)"
    phrase  `phrases[name][value]`, itself a template rendered with the same data
    each    a list of objects, each rendered with `phrases[name][item["kind"]]`, joined by "; "
    words   a list of values, each worded by `phrases[name][value]`, as "a, b and c"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from string import Formatter
from typing import Any

MAX_SNIPPET = 60

Phrases = Mapping[str, Mapping[Any, str]]


def render(template: str, data: Mapping[str, Any], phrases: Phrases | None = None) -> str:
    """`template` with its fields filled from `data` (a field it lacks is a programming error:
    KeyError naming the field)."""
    phrases = phrases or {}
    out: list[str] = []
    for literal, name, spec, conversion in Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if conversion or not name.isidentifier():
            raise ValueError(f"template field {{{name}}}: only plain names and a format")
        if name not in data:
            raise KeyError(f"template field {{{name}}} is not in the finding's data")
        value = data[name]
        if spec == "phrase":
            out.append(render(phrases[name][value], data, phrases))
        elif spec == "words":
            out.append(and_list([render(phrases[name][item], data, phrases) for item in value]))
        elif spec == "each":
            out.append("; ".join(render(phrases[name][item["kind"]], item, phrases)
                                 for item in value))
        elif spec:
            out.append(FORMATS[spec](value))
        else:
            out.append(str(value))
    return "".join(out)


def short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SNIPPET else text[: MAX_SNIPPET - 3] + "..."


def and_list(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) < 2 else f"{', '.join(items[:-1])} and {items[-1]}"


def places(changes: list[Mapping[str, Any]]) -> str:
    """Where a value changes: the first place in (file, row) order, and how many others."""
    ordered = sorted(changes, key=lambda c: (c["filename"], c["row"]))
    first = ordered[0]
    text = f"{first['how']} at {first['filename']}:{first['row']}"
    if first.get("function"):
        text += f" in `{first['function']}`"
    others = len(ordered) - 1
    if others:
        text += f" (and {others} other place{'s' if others > 1 else ''})"
    return text


FORMATS: dict[str, Callable[[Any], str]] = {
    "short": short,
    "last": lambda name: name.rsplit(".", 1)[-1],
    "ticks": lambda items: ", ".join(f"`{item}`" for item in items),
    "join": lambda items: ", ".join(str(item) for item in items),
    "at": lambda where: f"{where['filename']}:{where['row']}",
    "places": places,
}


def fields(template: str) -> set[str]:
    """The data fields a template names (its phrases not included)."""
    return {name for _, name, _, _ in Formatter().parse(template) if name}
