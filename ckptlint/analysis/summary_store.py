"""Facts about project files, kept between runs and keyed by each file's content.

The whole-project questions (who calls a function, who writes an attribute on another
object, who derives from a class or applies a decorator) and the phases read a few facts
from every project file: names it calls, attributes it writes, its class statements and
decorators (text scans), and its `ast` summary (`ckptlint.analysis.callgraph`). Each fact is
a pure function of the file's text, so it is stored under a digest of that text (and of the
ckptlint version): an edit changes the digest, and only the edited file's facts are made
again. Invalidation is exact by construction; nothing is keyed by path or time.

On disk (when the run uses the cache): one JSON file per text, `<digest>.json`, in
`summaries-<FORMAT>/` inside the cache folder, holding `{fact name: plain value}`. The
folder may sit inside the linted tree, so it is treated like the result cache
(docs/security.md): plain data read with `read_json` (no link followed, size capped),
every fact checked field by field when read, a wrong shape is a miss that is computed again
and overwritten; a folder that is a symbolic link is not used unless the user chose the
cache folder. Without the cache (`--no-cache`) facts are computed as asked; the callers keep
them for the run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ckptlint import __version__
from ckptlint.storage.markers import write_markers
from ckptlint.storage.plain_data import ShapeError, read_json, want_dict, write_json

T = TypeVar("T")

FORMAT = 1
MAX_ENTRY_BYTES = 64 * 1024 * 1024


def text_digest(text: str) -> str:
    return hashlib.blake2b(f"{__version__}\0{text}".encode("utf-8", "surrogatepass"),
                           digest_size=16).hexdigest()


class SummaryStore:
    """`fact(text, name, ...)`: a fact about a text, from memory, from disk or computed."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder  # None: nothing kept here (the callers keep facts for the run)
        self._entries: dict[str, dict[str, Any]] = {}  # digest -> fact name -> plain value
        self._changed: set[str] = set()
        # text -> its digest, for the run: each text is asked for several facts (the texts
        # are the project's, held for the run anyway).
        self._digests: dict[str, str] = {}

    @classmethod
    def in_cache(cls, cache_folder: Path, chosen: bool) -> SummaryStore:
        """The store inside the result cache's folder (none on disk when a link there may
        lead outside: a folder the user did not choose)."""
        folder = cache_folder / f"summaries-{FORMAT}"
        if not chosen and any(os.path.islink(p) for p in (cache_folder, folder)):
            return cls(None)
        return cls(folder)

    def fact(self, text: str, name: str, compute: Callable[[str], T],
             to_plain: Callable[[T], Any], from_plain: Callable[[Any], T]) -> T:
        if self.folder is None:
            return compute(text)  # the callers keep what they need for the run
        digest = self._digests.get(text)
        if digest is None:
            digest = self._digests[text] = text_digest(text)
        entry = self._entry(digest)
        if name in entry:
            try:
                return from_plain(entry[name])
            except (ShapeError, ValueError, TypeError):
                pass  # planted or from an older layout: a miss
        value = compute(text)
        entry[name] = to_plain(value)
        self._changed.add(digest)
        return value

    def _entry(self, digest: str) -> dict[str, Any]:
        entry = self._entries.get(digest)
        if entry is None:
            stored = (read_json(self.folder / f"{digest}.json", MAX_ENTRY_BYTES)
                      if self.folder is not None else None)
            try:
                entry = dict(want_dict(stored, "summary entry"))
            except ShapeError:
                entry = {}
            self._entries[digest] = entry
        return entry

    def flush(self) -> None:
        """Write the entries that gained facts, and forget the entries read (the callers keep
        the facts they asked for); nothing may fail a run: errors are ignored."""
        if self.folder is None or not self._changed:
            self._entries.clear()
            self._changed.clear()
            return
        try:
            cache_folder = self.folder.parent
            if not cache_folder.is_dir():
                cache_folder.mkdir(parents=True)
                write_markers(cache_folder)
            self.folder.mkdir(exist_ok=True)
            for digest in sorted(self._changed):
                write_json(self.folder / f"{digest}.json", self._entries[digest], durable=False)
        except (OSError, ValueError):  # read-only tree, full disk: the next run computes again
            pass
        self._entries.clear()
        self._changed.clear()
