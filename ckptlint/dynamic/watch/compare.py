"""Compare one pass of a checkpointed function with another (pure Python, no torch).

A pass record is a dict:
    ops:    [[op_name, digest | None], ...]     every aten op, in order, digest of its outputs
    saved:  [{"i", "op", "role", "shape", "dtype", "device", "d"}, ...]  tensors saved for
            backward, in pack order; d is the value digest or None (uninitialised/unreadable)
    early_stop: bool  (non-reentrant replay stopped after its last saved tensor)
    error: str | None
A digest is [sum, check] (digest.py): the float64 sum of the values, for the evidence text,
and an integer over their exact bit patterns and positions, which decides whether two values
are the same.

Traps handled here (docs/torch-facts.md, "The API"): a non-reentrant replay that stops early is a *prefix* of the
forward, so ops are compared only up to the replay's end; a reentrant (or no-grad) forward
saves nothing, so op outputs are compared position by position instead.
"""

from __future__ import annotations

from typing import Any


def same_digest(a, b) -> bool:
    """Whether two digests are of the same values (None: not readable, taken as the same)."""
    if a is None or b is None:
        return True
    return a[1] == b[1]


def sums(replay, forward, forward_said: str = "") -> str:
    """"sum R vs F" of two digests (then `forward_said`), with as many digits as it takes to
    tell the sums apart; values whose sums agree to the last digit differ elsewhere."""
    for digits in (4, 8, 17):
        r, f = f"{replay[0]:.{digits}g}", f"{forward[0]:.{digits}g}"
        if r != f:
            return f"sum {r} vs {f}{forward_said}"
    return f"sum {f} in both passes, other values"


def describe_saved(entry: dict[str, Any]) -> str:
    op, role = entry.get("op") or "", entry.get("role") or ""
    if op and role:
        return f"{op} {role}"
    if op:
        return f"tensor saved after {op}"
    return f"tensor #{entry.get('i', '?')}"


def compare(forward: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any]:
    """The first difference that matters, else the first that does not, else a match.

    Returns {"match": bool, "matters": bool, "kind": str, "text": str}. "matters" means the
    gradients can be wrong: a saved tensor differs, the op sequence changed, or the replay
    failed. An unsaved op output that differs is reported with matters=False.
    """
    if replay.get("error"):
        return _result(False, True, "error", f"raised {replay['error']}")
    fsaved, rsaved = forward.get("saved") or [], replay.get("saved") or []
    fops, rops = forward.get("ops") or [], replay.get("ops") or []
    by_saved = bool(fsaved)
    if by_saved:
        for f, r in zip(fsaved, rsaved):
            if not r.get("op"):     # the replay stopped before the op that saved it ran
                r = dict(r, op=f.get("op"), role=f.get("role"))
            fmeta = (f.get("shape"), f.get("dtype"), f.get("device"))
            rmeta = (r.get("shape"), r.get("dtype"), r.get("device"))
            if fmeta != rmeta:
                return _result(False, True, "saved-meta",
                               f"saved a {describe_saved(r)} of shape {r.get('shape')} "
                               f"{r.get('dtype')} on {r.get('device')} where the forward saved "
                               f"a {describe_saved(f)} of shape {f.get('shape')} {f.get('dtype')} "
                               f"on {f.get('device')}")
            if not same_digest(f.get("d"), r.get("d")):
                told = sums(r["d"], f["d"])
                if (f.get("op"), f.get("role")) != (r.get("op"), r.get("role")):
                    return _result(False, True, "saved-value",
                                   f"saved a {describe_saved(r)} where the forward saved a "
                                   f"{describe_saved(f)} ({told})")
                return _result(False, True, "saved-value",
                               f"saved a different {describe_saved(f)} "
                               f"({sums(r['d'], f['d'], ' in the forward')})")
        if len(rsaved) != len(fsaved) and not (replay.get("early_stop")
                                               and len(rsaved) == len(fsaved)):
            return _result(False, True, "saved-count",
                           f"saved {len(rsaved)} tensors where the forward saved {len(fsaved)}")
    # Op sequence: a non-reentrant replay with early stop is a prefix of the forward.
    for index, (f, r) in enumerate(zip(fops, rops)):
        if f[0] != r[0]:
            return _result(False, True, "ops",
                           f"ran {r[0]} where the forward ran {f[0]} (op #{index + 1})")
    if len(rops) > len(fops):
        return _result(False, True, "ops",
                       f"ran {len(rops)} ops where the forward ran {len(fops)}")
    if not by_saved and len(rops) < len(fops) and not replay.get("early_stop"):
        return _result(False, True, "ops",
                       f"ran {len(rops)} ops where the forward ran {len(fops)}")
    for index, (f, r) in enumerate(zip(fops, rops)):
        if not same_digest(f[1], r[1]):
            if by_saved:
                return _result(False, False, "unsaved-output",
                               f"only the unsaved output of {r[0]} (op #{index + 1}) differed "
                               f"({sums(r[1], f[1])})")
            return _result(False, True, "output",
                           f"{r[0]} (op #{index + 1}) returned a different value "
                           f"({sums(r[1], f[1], ' in the forward')})")
    return _result(True, False, "match", "matched")


def _result(match: bool, matters: bool, kind: str, text: str) -> dict[str, Any]:
    return {"match": match, "matters": matters, "kind": kind, "text": text}
