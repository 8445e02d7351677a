"""Python's and NumPy's global random streams around a pass (child side).

Checkpointing restores torch's generators for the replay, never Python's `random` or NumPy's
global one: a segment that draws from them draws again in the replay, gets other numbers, and
leaves the stream one draw further on than an uncheckpointed run would. Taking a fingerprint
of each stream before and after a pass shows whether it drew; reading the state changes
nothing.
"""

from __future__ import annotations

import random
import sys


def fingerprints() -> dict[str, int]:
    """{"python": ..., "numpy": ...} (NumPy only once the program imported it)."""
    out = {"python": hash(random.getstate())}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            kind, keys, pos, has_gauss, cached = numpy.random.get_state()
            out["numpy"] = hash((kind, keys.tobytes(), pos, has_gauss, cached))
        except Exception:
            pass
    return out


def drawn(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The streams that moved between two fingerprints."""
    return sorted(name for name, value in after.items() if name in before
                  and before[name] != value)
