"""Facts about project files, kept between runs and keyed by each file's content.

The whole-project questions (who calls a function, who writes an attribute on another
object, who derives from a class or applies a decorator) and the phases read a few facts
from every project file: names it calls, attributes it writes, its class statements and
decorators (text scans), and its `ast` summary (`ckptlint.analysis.callgraph`). Each fact is
a pure function of the file's text, so it is stored under a digest of that text (and of the
ckptlint version): an edit changes the digest, and only the edited file's facts are made
again. Invalidation is exact by construction: these facts are not keyed by path or time.

The facts asked of every project file (`path_fact`: the names a file calls, the attributes
it writes on other objects, its class bases and decorators, its possible hand-written
checkpoint classes) are small, and a run asks them of thousands of files: reading each text
and digesting it, then one entry file per text, was most of what re-linting one edited file
cost. They are kept by path instead, in one file, with the stat signature the file had
when its text was read (`ckptlint.storage.file_signature`, what the result cache trusts
too): while a file keeps that signature, its facts are answered without reading it; any
write to it changes the signature, and its facts are made again from its text.

On disk (when the run uses the cache): one JSON file per text, `<digest>.json`, in
`summaries-<FORMAT>/` inside the cache folder, holding `{fact name: plain value}`, and
`files.json` there, `{path: [size, mtime, ctime, inode, {fact name: plain value}]}`. The
folder may sit inside the linted tree, so it is treated like the result cache
(docs/security.md): plain data read with `read_json` (no link followed, size capped),
every fact checked field by field when read, a wrong shape is a miss that is computed again
and overwritten; a folder that is a symbolic link is not used unless the user chose the
cache folder. Without the cache (`--no-cache`) facts are computed as asked; the callers keep
them for the run.

Analysing workers forked from one run ask for many of the same facts (every worker asks who
calls a common method, and so for the summaries of the same hundreds of files). While they
run, the store is shared (`share`): a fact made is written at once, and one missing is
looked for on disk again before it is made. Without the cache the run gives them a store of
its own for that, in a temporary folder it removes at the end (`for_run`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ckptlint import __version__
from ckptlint.storage.file_signature import Signature, signature
from ckptlint.storage.markers import write_markers
from ckptlint.storage.plain_data import ShapeError, read_json, want_dict, write_json

T = TypeVar("T")

FORMAT = 3  # 1: each name's call sites as a list of lists; 2: relative imports unmarked
MAX_ENTRY_BYTES = 64 * 1024 * 1024
BY_PATH = "files.json"  # the facts asked of every project file, by path (`path_fact`)

# A file's text (None when it cannot be read) and its stat signature when it was read.
SignedText = tuple[str | None, Signature | None]


def current_signature(path: str) -> list[int] | None:
    """The file's stat signature now, as `files.json` stores it (None when it cannot be
    stat-ed: gone, or a planted path that is no path)."""
    try:
        return list(signature(os.stat(path)))
    except (OSError, ValueError):
        return None


def fresh_record(record: Any, now: list[int] | None) -> bool:
    """Whether a record of `files.json` has its shape and was made when the file had the
    signature it has `now`."""
    return (now is not None and type(record) is list and len(record) == 5
            and record[:4] == now and type(record[4]) is dict)


def text_digest(text: str) -> str:
    return hashlib.blake2b(f"{__version__}\0{text}".encode("utf-8", "surrogatepass"),
                           digest_size=16).hexdigest()


class SummaryStore:
    """`fact(text, name, ...)`: a fact about a text, from memory, from disk or computed."""

    def __init__(self, folder: Path | None = None, *, keeps_paths: bool = True) -> None:
        self.folder = folder  # None: nothing kept here (the callers keep facts for the run)
        # Whether facts by path are kept in the folder (not in a run's own folder, `for_run`).
        self.keeps_paths = keeps_paths and folder is not None
        # Set while several processes analyse with this store (`share`): a fact made is
        # written at once, and one missing is looked for on disk again before it is made.
        self.shared = False
        self._entries: dict[str, dict[str, Any]] = {}  # digest -> fact name -> plain value
        self._changed: set[str] = set()
        # The last text asked about and its digest: a text is asked for several facts in
        # turn. Only the last: the texts handed in are often decoded copies (the project
        # keeps one not all ASCII as UTF-8), and a memo of all of them held 15 to 18 MiB
        # in each worker on diffusers.
        self._last_digest: tuple[str, str] | None = None
        # path -> [size, mtime, ctime, inode, {fact name: plain value}], read when first asked
        # and dropped at each flush (the callers keep what they asked for).
        self._by_path: dict[str, Any] | None = None
        self._by_path_changed: set[str] = set()

    @classmethod
    def in_cache(cls, cache_folder: Path, chosen: bool) -> SummaryStore:
        """The store inside the result cache's folder (none on disk when a link there may
        lead outside: a folder the user did not choose)."""
        folder = cache_folder / f"summaries-{FORMAT}"
        if not chosen and any(os.path.islink(p) for p in (cache_folder, folder)):
            return cls(None)
        return cls(folder)

    @classmethod
    def for_run(cls, folder: Path) -> SummaryStore:
        """A store for one run without the cache, in a new folder of its own (outside the
        tree; the run removes it): only its workers share the text facts there."""
        return cls(folder, keeps_paths=False)

    def share(self) -> None:
        """From now on several processes (forked with this store) make facts at the same
        time: each writes what it makes at once and reads what another wrote, so that a
        fact every worker asks for (the summaries of the files calling a common name) is
        made about once, not once per worker."""
        if self.folder is not None:
            self.shared = True

    def fact(self, text: str, name: str, compute: Callable[[str], T],
             to_plain: Callable[[T], Any], from_plain: Callable[[Any], T]) -> T:
        if self.folder is None:
            return compute(text)  # the callers keep what they need for the run
        last = self._last_digest
        if last is not None and last[0] is text:
            digest = last[1]
        else:
            digest = text_digest(text)
            self._last_digest = (text, digest)
        entry = self._entry(digest)
        if name not in entry and self.shared:
            entry = self._entry(digest, again=True)  # another worker may have made it
        if name in entry:
            try:
                return from_plain(entry[name])
            except (ShapeError, ValueError, TypeError):
                pass  # planted or from an older layout: a miss
        value = compute(text)
        entry[name] = to_plain(value)
        self._changed.add(digest)
        if self.shared:
            self._write_entries()
        return value

    def path_fact(self, path: Path, name: str, read: Callable[[], SignedText],
                  compute: Callable[[str], T], to_plain: Callable[[T], Any],
                  from_plain: Callable[[Any], T]) -> T | None:
        """A fact about the text of the file at `path` (None when it has none), answered
        without reading it while it keeps the stat signature it had when the fact was made.
        `read` gives the text and the file's signature when it was read (stat first): a
        fact is kept only when the file still has that signature."""
        if not self.keeps_paths:
            text, _ = read()
            return compute(text) if text else None
        key = str(path)
        now = current_signature(key)
        record = self._path_record(key, now)
        if record is not None and name in record[4]:
            try:
                return from_plain(record[4][name])
            except (ShapeError, ValueError, TypeError):
                pass  # planted or from an older layout: a miss
        text, read_as = read()
        if not text:
            return None
        value = compute(text)
        if now is not None and read_as is not None and list(read_as) == now:
            self._keep(key, now, record, {name: to_plain(value)})
        return value

    def keep_path_facts(self, path: Path, read_as: list[int] | None,
                        facts: dict[str, Any]) -> None:
        """Facts (plain) another process made from the text of the file at `path`, read
        when the file had the signature `read_as`: kept as `path_fact` keeps its own, while
        the file still has that signature."""
        if not self.keeps_paths or read_as is None or not facts:
            return
        key = str(path)
        now = current_signature(key)
        if now is not None and now == read_as:
            self._keep(key, now, self._path_record(key, now), facts)

    def _keep(self, key: str, now: list[int], record: list[Any] | None,
              facts: dict[str, Any]) -> None:
        """Store `facts` (plain) in the file's record (`record`, made when None) under its
        signature `now`."""
        if record is None:
            assert self._by_path is not None
            record = self._by_path[key] = [*now, {}]
        record[4].update(facts)
        self._by_path_changed.add(key)

    def holds_path_facts(self, name: str, paths: list[Path]) -> bool:
        """Whether `path_fact` answers `name` for nearly all of `paths` (all but a tenth)
        without reading them (a stat each): then a whole-project index of that fact costs
        little more than making it for the few files edited since."""
        if not self.keeps_paths:
            return False
        allowed = len(paths) // 10
        for path in paths:
            key = str(path)
            record = self._path_record(key, current_signature(key))
            if record is None or name not in record[4]:
                allowed -= 1
                if allowed < 0:
                    return False
        return True

    def _path_record(self, key: str, now: list[int] | None) -> list[Any] | None:
        """The stored record of the file `key` when its signature is `now` (a different one
        is dropped: the file changed)."""
        if self._by_path is None:
            self._by_path = self._read_by_path()
        record = self._by_path.get(key)
        if record is None:
            return None
        if not fresh_record(record, now):
            del self._by_path[key]
            return None
        return record

    def _read_by_path(self) -> dict[str, Any]:
        stored = (read_json(self.folder / BY_PATH, MAX_ENTRY_BYTES)
                  if self.folder is not None else None)
        return dict(stored) if type(stored) is dict else {}

    def close(self) -> None:
        """Keep nothing on disk from now on (a run's own folder is about to be removed)."""
        self.folder = None
        self.keeps_paths = self.shared = False
        self._entries.clear()
        self._changed.clear()

    def _entry(self, digest: str, again: bool = False) -> dict[str, Any]:
        """The facts stored for a text, read once (`again`: read again, and merged with the
        facts this process made and has not written yet)."""
        entry = self._entries.get(digest)
        if entry is None or again:
            stored = (read_json(self.folder / f"{digest}.json", MAX_ENTRY_BYTES)
                      if self.folder is not None else None)
            try:
                read = dict(want_dict(stored, "summary entry"))
            except ShapeError:
                read = {}
            entry = self._entries[digest] = {**read, **(entry or {})}
        return entry

    def flush(self) -> None:
        """Write the entries that gained facts, and forget the entries read (the callers keep
        the facts they asked for); nothing may fail a run: errors are ignored."""
        self._write_entries()
        if self.folder is not None and self._by_path_changed:
            try:
                self._make_folder()
                write_json(self.folder / BY_PATH, self._merged_by_path(), durable=False)
            except (OSError, ValueError):  # read-only tree, full disk: the next run computes
                pass
        self._entries.clear()
        self._changed.clear()
        self._by_path = None
        self._by_path_changed.clear()

    def _write_entries(self) -> None:
        """Write the entries that gained facts (errors ignored: the next run computes)."""
        if self.folder is None or not self._changed:
            return
        try:
            self._make_folder()
            for digest in sorted(self._changed):
                write_json(self.folder / f"{digest}.json", self._entries[digest], durable=False)
        except (OSError, ValueError):
            pass
        self._changed.clear()

    def _make_folder(self) -> None:
        assert self.folder is not None
        cache_folder = self.folder.parent
        if not cache_folder.is_dir():
            cache_folder.mkdir(parents=True)
            write_markers(cache_folder)
        self.folder.mkdir(exist_ok=True)

    def _merged_by_path(self) -> dict[str, Any]:
        """What is stored by path now (another process may have written since this one
        read it), with this process's new records, less the records of files that are gone
        or changed since."""
        assert self._by_path is not None
        merged = self._read_by_path()
        merged.update((key, self._by_path[key]) for key in self._by_path_changed
                      if key in self._by_path)
        return {key: record for key, record in merged.items()
                if fresh_record(record, current_signature(key))}
