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
    places  a list of changes ({"how", "filename", "row", "function", "phase", "because",
            "via"}) as "rebound at f.py:20 in `set_gain`, called from `train` between the
            forward and `.backward()` (and 2 other places)"
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


# Why a change can reach the replay (`changes[].because`), worded with where it is (`{where}`:
# "in `f`" or "at module level"); `WHEN_VIA_PHRASES` when another function decides (`{via}`).
WHEN_PHRASES = {
    "segment": "{where}, inside this checkpointed code, so the replay reads what its forward "
               "left",
    "forward": "{where}, a forward that can run after this segment",
    "forward-hook": "{where}, a forward hook that can run after this segment",
    "backward-hook": "{where}, a backward hook that can run before this segment's replay",
    "training": "{where}, between the forward and `.backward()`",
    "uncalled": "{where}, which nothing in the project calls, so training code may call it "
                "between the forward and `.backward()`",
    "entry-point": "{where}, called only from functions nothing in the project calls (when "
                   "it runs is unknown)",
    "setup": "{where}, setup only",
    "setter": "{where}, a setter (configuration only)",
    "between-steps": "{where}, between training steps",
    "module-level": "{where}, configuration only",
}
WHEN_VIA_PHRASES = {
    "forward": "{where}, called from `{via}` in the forward after this segment ran",
    "forward-hook": "{where}, called from the forward hook `{via}` after this segment ran",
    "backward-hook": "{where}, called from the backward hook `{via}` before this segment's "
                     "replay",
    "training": "{where}, called from `{via}` between the forward and `.backward()`",
    "uncalled": "{where}, reached from `{via}`, which nothing in the project calls, so "
                "training code may call it between the forward and `.backward()`",
    "entry-point": "{where}, called only from `{via}`, which nothing in the project calls "
                   "(when it runs is unknown)",
    "setup": "{where}, called only from setup (`{via}`)",
    "setter": "{where}, called from the setter `{via}` (configuration only)",
    "between-steps": "{where}, called from `{via}` between training steps",
}
# The order in which the first place named is chosen: the most run-time phase first.
PHASE_ORDER = ("segment", "forward", "backward-hook", "step", "configuration")


def places(changes: list[Mapping[str, Any]]) -> str:
    """Where a value changes and when that runs: the first place (by phase, then file and
    row) and how many others."""
    ordered = sorted(changes, key=lambda c: (
        PHASE_ORDER.index(c["phase"]) if c.get("phase") in PHASE_ORDER else len(PHASE_ORDER),
        c["filename"], c["row"]))
    first = ordered[0]
    text = f"{first['how']} at {first['filename']}:{first['row']}"
    function, via, because = first.get("function"), first.get("via"), first.get("because")
    where = f"in `{function}`" if function else "at module level"
    if because in WHEN_PHRASES:
        phrase = (WHEN_VIA_PHRASES[because] if via not in (None, function)
                  and because in WHEN_VIA_PHRASES else WHEN_PHRASES[because])
        text += " " + phrase.format(where=where, via=via)
    elif function:
        text += f" {where}"
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
