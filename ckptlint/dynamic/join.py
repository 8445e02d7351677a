"""Which static checkpoint sites a watched call belongs to (no torch here).

A watched call carries its run-time site (the innermost frame outside torch, libraries and
ckptlint: the line that called a checkpoint API) and its targets (file, first line and
qualname of each function it checkpointed). A static site carries its position, the
functions it checkpoints and its API. A call belongs to:

1. the static site at its own position (file and row), when there is one: a direct call;
2. else (the call was made from library code: `checkpoint_wrapper`,
   `apply_activation_checkpointing`, `checkpoint_sequential`, composable checkpoint,
   transformers layers) the static sites that checkpoint one of its targets, leaving out the
   sites this run reached directly and then, while more than one remains, the sites of the
   plain checkpoint APIs (whose calls always come from the site itself).

`SiteIndex.sites_of` answers that for dynamic mode (which findings a call judges) and for
profile (which row of the table a call counts in, when exactly one site remains).
`target_keys` is how both, and the watched child's state watcher, key a call's targets.
"""

from __future__ import annotations

import functools
import linecache
import os
from dataclasses import dataclass, field
from typing import Iterable, Sequence

Key = tuple[str, int]    # (realpath, row)
Site = tuple[str, int, int]
Target = tuple[str, int, str]

DIRECT_APIS = ("torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential")


def real(filename: str) -> str:
    return os.path.realpath(filename)


@functools.lru_cache(maxsize=4096)
def code_rows(filename: str, first_line: int) -> frozenset[int]:
    """The first line of a code object and its `def` line (decorated functions differ)."""
    rows = {first_line}
    for row in range(first_line, first_line + 50):
        text = linecache.getline(filename, row).lstrip()
        if not text:
            continue
        if text.startswith(("def ", "async def ", "class ")):
            rows.add(row)
            break
    return frozenset(rows)


def target_keys(targets: Iterable[Sequence]) -> set[Key]:
    """The keys a static site's target can have for a call's targets (file, first line, ...)."""
    return {(filename, row) for filename, first, *_ in targets
            for row in code_rows(filename, first)}


@dataclass
class StaticSite:
    key: Key                    # (realpath, row)
    position: Site              # as the linter reports it (filename as given, row, column)
    api: str = ""
    targets: set[Key] = field(default_factory=set)   # (realpath, row) of each function


class SiteIndex:
    """The static sites of a run, to match the run's calls to."""

    def __init__(self) -> None:
        self.by_key: dict[Key, StaticSite] = {}
        self.by_target: dict[Key, list[Key]] = {}

    @classmethod
    def of_records(cls, records: Iterable) -> SiteIndex:
        """From the linter's site records (`site`, `targets`, `api`)."""
        index = cls()
        for record in records:
            index.add(record.site, record.targets, record.api)
        return index

    def add(self, site, targets: Iterable = (), api: str = "") -> None:
        """A site (with `filename`, `row`, `column`) and the targets (with `filename`, `row`)
        it checkpoints; a site added again gains the new targets."""
        key = (real(site.filename), site.row)
        found = self.by_key.get(key)
        if found is None:
            found = self.by_key[key] = StaticSite(key, (site.filename, site.row, site.column), api)
        found.api = found.api or api
        for target in targets:
            target_key = (real(target.filename), target.row)
            found.targets.add(target_key)
            keys = self.by_target.setdefault(target_key, [])
            if key not in keys:
                keys.append(key)

    def direct(self, site: Sequence | None) -> StaticSite | None:
        """The static site at a call's own position."""
        return self.by_key.get((site[0], site[1])) if site else None

    def reached(self, call_sites: Iterable[Sequence | None]) -> frozenset[Key]:
        """The static sites that these calls reached directly."""
        return frozenset(found.key for found in map(self.direct, call_sites) if found)

    def sites_of(self, site: Sequence | None, targets: Iterable[Sequence],
                 reached: frozenset[Key] = frozenset()) -> list[StaticSite]:
        """The static sites a call belongs to (see the module docstring): its own, else the
        candidates through its targets; more than one when the run cannot tell them apart."""
        found = self.direct(site)
        if found is not None:
            return [found]
        keys: list[Key] = []
        for target in sorted(target_keys(targets)):
            keys += [key for key in self.by_target.get(target, ())
                     if key not in keys and key not in reached]
        candidates = [self.by_key[k] for k in keys]
        if len(candidates) > 1:
            candidates = [c for c in candidates if c.api not in DIRECT_APIS]
        return candidates
