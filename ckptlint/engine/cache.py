"""The result cache: per-file findings keyed by file bytes, configuration and version.

Where: `$CKPTLINT_CACHE_DIR`, else `cache-dir` from the configuration, else
`.ckptlint_cache/` next to the configuration file (or in the current folder). One JSON file
per run key, `run-<key>.json`, holds every file's entry; the run key digests everything
outside the file that can change its findings: the cache format, the ckptlint version, the
configuration fingerprint, the import roots, the current folder (findings name files
relative to it), the Python version and, when the configuration does not pin it, the
installed transformers and trl versions (CKP104 reads them).

An entry is valid when the file's bytes digest to the stored digest and every file its
analysis looked at (cross-file modules a segment reached into, and module paths it probed
and did not find) is unchanged. A probed path that did not exist is stored as the nearest
folder above it that does, with a digest of the names in that folder (a folder stamp):
creating the path, or any folder on the way to it, adds a name there. Name lookups probe
many absent paths (two per import root for each dotted name tried; over a hundred thousand
for one site file in the torch tree), and most share a few folders: a warm run checks those
folders, not each path. A file that was analysed (it holds a site) also depends on
the whole project: whether state a segment reads "is changed elsewhere" (CKP201/CKP204) is
answered by scanning every project file, so any added, removed or changed `.py` file under
the import roots invalidates those entries (and only those: they are the few with sites). So
does a file the screens passed or rejected by the project's possible hand-written checkpoint
classes (one that calls `.apply`: a class elsewhere may become one). A
file's stat signature (size, mtime, ctime, inode) stands in for re-reading it when
unchanged, as ruff does; anything else is re-read and re-digested.

The cache may sit inside the linted tree, which may have put a file there: it is plain data
(`ckptlint.storage.plain_data`), and each entry is checked field by field when first looked up; one
of the wrong shape is a miss. A stored dependency is looked at only when it lies inside an
import root or the configuration's folder, links resolved (`inside_tree`), and read only when
it is a regular file: an entry naming any other path (`/etc/shadow`, `/dev/zero`, a link out of
the tree) is a miss, so a planted run file can neither learn whether a file outside the tree
has given bytes nor hang the run on a device. Unless the user chose the folder
(`$CKPTLINT_CACHE_DIR`, `cache-dir` in a `--config FILE`), a cache folder or run file that is a
symbolic link is neither read nor written through: the run goes on without a cache and says so
once.

Nothing here may fail a run: an unreadable, corrupt or unwritable cache is ignored.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptlint import __version__
from ckptlint.analysis.project import MAX_PROJECT_FILES, SKIPPED_DIRS
from ckptlint.analysis.setup import default_place_configs
from ckptlint.analysis.summary_store import SummaryStore
from ckptlint.findings import Finding, SiteRecord
from ckptlint.storage.file_signature import Signature, signature
from ckptlint.storage.markers import write_markers
from ckptlint.storage.plain_data import (
    MAX_FILE_BYTES,
    ShapeError,
    read_json,
    read_regular_file,
    want_list,
    want_optional_str,
    want_str,
    write_json,
)

CACHE_DIR_ENV = "CKPTLINT_CACHE_DIR"
DEFAULT_DIR_NAME = ".ckptlint_cache"
FORMAT = 7  # 1: a pickle (`run-<key>.pickle`), never read again; 2: findings without `data`;
# 3: state findings without phases decided by the call graph (no `because`/`via`); 4: every
# absent dependency stored on its own, no folder stamps; 5: phases linking a method to calls
# on a module or class outside the project; 6: a linted file reached from another named in
# a finding's data as the current folder saw it, not as the run reports it
FOLDER_STAMP = "folder "  # prefix of a dependency's stored value that stamps a folder

CacheKey = tuple[Signature, str]  # (stat signature, digest): what a file is cached under


_notes_given: set[str] = set()


def cache_location(config) -> tuple[Path, bool]:
    """The cache folder, and whether the user chose it (rather than the linted tree)."""
    from_env = os.environ.get(CACHE_DIR_ENV)
    if from_env:
        return Path(from_env), True
    if config.cache_dir is not None:
        return Path(config.cache_dir), config.named_on_command_line
    return Path(config.root) / DEFAULT_DIR_NAME, False


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def environment_fingerprint(config) -> str:
    """Settings outside the configuration that change findings."""
    parts = [f"python {sys.version_info[:2]}"]
    pinned = dict(config.versions)
    if config.transformers_version is not None:
        pinned["transformers"] = config.transformers_version
    for package in ("transformers", "trl"):  # CKP104 reads both
        if package in pinned:
            continue  # part of the configuration's fingerprint
        from ckptlint.versions import declared_ranges

        declared = declared_ranges(config.project_root, package)
        parts.append(f"{package} {declared.ranges}" if declared is not None
                     else f"{package} {installed_distributions(package)}")
    return "; ".join(parts)


def installed_distributions(name: str) -> list[str]:
    """The `name-VERSION.dist-info` folders on sys.path (as importlib.metadata finds them,
    without importing it: the clean-file budget is 100 ms)."""
    found: list[str] = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found.extend(f"{entry}/{item}" for item in names
                     if item.lower().startswith(f"{name}-")
                     and item.endswith((".dist-info", ".egg-info")))
    return sorted(found)


def run_key(config, roots: list[Path]) -> str:
    return hashlib.blake2b(repr((
        FORMAT, __version__, config.fingerprint, sorted(str(r) for r in roots),
        os.getcwd(), environment_fingerprint(config),
    )).encode(), digest_size=12).hexdigest()


@dataclass
class Entry:
    signature: Signature
    digest: str
    findings: list[Finding]
    sites: list[SiteRecord]
    # (absolute path, digest or None when it could not be read, or, for a folder standing for
    # absent paths beneath it, its stamp: FOLDER_STAMP + a digest of its names)
    dependencies: tuple[tuple[str, str | None], ...] = ()
    project: str | None = None  # the project signature, for answers resting on the whole project

    # As plain data, one flat list (parsed and checked faster than an object, and the
    # torch tree's warm run reads 2,300 of them): [size, mtime_ns, ctime_ns, inode, digest,
    # findings, sites, [[dependency path, digest or null], ...], project signature or null].
    def to_json(self) -> list:
        return [*self.signature, self.digest, [finding.to_json() for finding in self.findings],
                [site.to_json() for site in self.sites],
                [list(pair) for pair in self.dependencies], self.project]

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """What `to_json` wrote, every field checked (ShapeError otherwise)."""
        if type(data) is not list or len(data) != 9:
            raise ShapeError("cache entry: expected a list of 9 fields")
        *stat_fields, file_digest, findings, sites, dependencies, project = data
        if not all(type(value) is int for value in stat_fields):
            raise ShapeError("cache entry: expected a stat signature of 4 integers")
        pairs = []
        for pair in want_list(dependencies, "dependencies"):
            if type(pair) is not list or len(pair) != 2:
                raise ShapeError("dependency: expected [path, digest]")
            pairs.append((want_str(pair[0], "dependency"),
                          want_optional_str(pair[1], "dependency digest")))
        return cls(
            tuple(stat_fields), want_str(file_digest, "digest"),
            [Finding.from_json(item) for item in want_list(findings, "findings")],
            [SiteRecord.from_json(item) for item in want_list(sites, "sites")],
            tuple(pairs), want_optional_str(project, "project"))


@dataclass
class Cache:
    path: Path
    roots: list[Path] = field(default_factory=list)
    # For a root that is an environment folder: the entries being linted there (the only
    # ones the project scan reads: `Project.environment_entries`).
    environment_entries: dict[Path, set[str]] = field(default_factory=dict)
    config_root: Path = Path(".")  # where configs at their default places are looked for
    # Entries by display name: checked and decoded ones, and those as read (checked when
    # first looked up; `entry`).
    entries: dict[str, Entry] = field(default_factory=dict)
    unchecked: dict[str, Any] = field(default_factory=dict)
    # [size, mtime_ns, ctime_ns, inode, digest] of every file hashed (linted files and
    # dependencies), by absolute path, as plain data (checked where read: `known_digest`).
    digests: dict[str, Any] = field(default_factory=dict)
    changed: bool = False
    # Facts about project files by content, next to the entries (`summary_store`).
    summaries: SummaryStore | None = None
    _current: dict[str, str | None] = field(default_factory=dict)  # digests seen this run
    _stamps: dict[str, str | None] = field(default_factory=dict)  # folder stamps seen this run
    _project: str | None = None
    _bases: tuple[str, ...] | None = None  # the folders dependencies may lie in, resolved
    _real_folders: dict[str, str] = field(default_factory=dict)  # `inside_tree`'s memo

    @classmethod
    def open(cls, config, roots: list[Path],
             environment_entries: dict[Path, set[str]] | None = None) -> Cache | None:
        """The cache for this run; None when it must not be used (a link in the tree).
        `environment_entries`: as the attribute."""
        folder, chosen = cache_location(config)
        path = folder / f"run-{run_key(config, roots)}.json"
        if not chosen:
            link = next((p for p in (folder, path) if os.path.islink(p)), None)
            if link is not None:
                note_once(f"ckptlint: {link} is a symbolic link; running without the cache "
                          "(a cache inside the project is never used through a link)")
                return None
        cache = cls(path, roots=list(roots), environment_entries=environment_entries or {},
                    config_root=config.root,
                    summaries=SummaryStore.in_cache(folder, chosen))
        data = read_json(path)
        if (type(data) is dict and data.get("format") == FORMAT
                and type(data.get("entries")) is dict and type(data.get("digests")) is dict):
            cache.unchecked = data["entries"]
            cache.digests = data["digests"]
        return cache

    # -- lookups -----------------------------------------------------------------------
    def entry(self, display: str) -> Entry | None:
        """The entry stored for this file, if there is one of the right shape."""
        found = self.entries.get(display)
        if found is None and display in self.unchecked:
            try:
                found = Entry.from_json(self.unchecked.pop(display))
            except ShapeError:
                return None
            self.entries[display] = found
        return found

    def lookup(self, display: str, path: Path, info: os.stat_result) -> Entry | None:
        """The entry for this file if its stat signature and dependencies are unchanged."""
        entry = self.entry(display)
        if entry is None or entry.signature != signature(info):
            return None
        self._current[str(path.absolute())] = entry.digest
        return entry if self.dependencies_unchanged(entry) else None

    def lookup_bytes(self, display: str, path: Path, info: os.stat_result,
                     data: bytes) -> tuple[str, Entry | None]:
        """The file's digest, and its entry if the bytes and dependencies are unchanged."""
        file_digest = digest(data)
        self._current[str(path.absolute())] = file_digest
        self.digests[str(path.absolute())] = [*signature(info), file_digest]
        entry = self.entry(display)
        if (entry is None or entry.digest != file_digest
                or not self.dependencies_unchanged(entry)):
            return file_digest, None
        entry.signature = signature(info)
        self.changed = True
        return file_digest, entry

    def dependencies_unchanged(self, entry: Entry) -> bool:
        if entry.project is not None and entry.project != self.project_signature():
            return False
        return all(self.inside_tree(path) and (self.folder_stamp(path) if expected is not None
                    and expected.startswith(FOLDER_STAMP) else self.current_digest(path))
                   == expected for path, expected in entry.dependencies)

    def inside_tree(self, path: str) -> bool:
        """Whether a stored dependency path may be looked at: absolute and normalised, and,
        its folder's links resolved (and the path's own, when it is a link), inside an import
        root or the configuration's folder, the only places a run records dependencies in."""
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            return False
        if self._bases is None:
            self._bases = tuple(os.path.realpath(base) for base in
                                (*self.roots, self.config_root))
        real = os.path.realpath(path) if os.path.islink(path) else os.path.join(
            self.real_folder(os.path.dirname(path)), os.path.basename(path))
        return any(real == base or real.startswith(base.rstrip(os.sep) + os.sep)
                   for base in self._bases)

    def real_folder(self, folder: str) -> str:
        real = self._real_folders.get(folder)
        if real is None:
            real = self._real_folders[folder] = os.path.realpath(folder)
        return real

    def project_signature(self) -> str:
        """Paths, sizes and modification times of every project `.py` file (once per run)."""
        if self._project is None:
            self._project = project_signature(self.roots, self.config_root,
                                              self.environment_entries)
        return self._project

    def known_digest(self, path: str, file_signature: Signature) -> str | None:
        """The digest recorded for `path` when it had this stat signature."""
        known = self.digests.get(path)
        if (type(known) is list and len(known) == 5 and known[:4] == list(file_signature)
                and type(known[4]) is str):
            return known[4]
        return None

    def current_digest(self, path: str) -> str | None:
        if path in self._current:
            return self._current[path]
        try:
            info = os.stat(path)
        except OSError:
            value = None
        else:
            value = self.known_digest(path, signature(info))
            if value is None:
                data = read_regular_file(Path(os.path.realpath(path)), MAX_FILE_BYTES)
                if data is not None:
                    value = digest(data)
                    self.digests[path] = [*signature(info), value]
                    self.changed = True
        self._current[path] = value
        return value

    def folder_stamp(self, path: str) -> str | None:
        """A digest of the names in the folder (None when it is not a folder that can be
        listed). Names, not the modification time: an editor's atomic save (write a copy,
        rename it over the file) changes the time and leaves the names as they were."""
        if path not in self._stamps:
            try:
                names = sorted(os.listdir(path))
            except OSError:
                self._stamps[path] = None
            else:
                self._stamps[path] = FOLDER_STAMP + digest("\0".join(names).encode(
                    "utf-8", "surrogateescape"))
        return self._stamps[path]

    def dependency(self, path: str) -> tuple[str, str | None]:
        """What to store for one dependency: its digest, or for a path that does not exist
        the stamp of the nearest folder above it that does."""
        value = self.current_digest(path)
        if value is not None or os.path.lexists(path):
            return path, value
        folder = os.path.dirname(path)
        while folder != os.path.dirname(folder) and self.folder_stamp(folder) is None:
            folder = os.path.dirname(folder)
        stamp = self.folder_stamp(folder)
        return (folder, stamp) if stamp is not None else (path, None)

    # -- updates -----------------------------------------------------------------------
    def record(self, path: Path, file_signature: Signature, file_digest: str, *, hit: bool,
               display: str) -> None:
        """What `lookup_bytes` learnt, when a worker process called it on its own copy."""
        self._current[str(path.absolute())] = file_digest
        self.digests[str(path.absolute())] = [*file_signature, file_digest]
        entry = self.entry(display) if hit else None
        if entry is not None and entry.signature != file_signature:
            entry.signature = file_signature
            self.changed = True

    def store(self, display: str, file_signature: Signature, file_digest: str,
              findings: list[Finding], sites: list[SiteRecord], dependencies: tuple[str, ...],
              whole_project: bool) -> None:
        """`whole_project`: the answer rests on the whole project (see above)."""
        self.unchecked.pop(display, None)
        self.entries[display] = Entry(
            file_signature, file_digest, list(findings), list(sites),
            tuple(dict.fromkeys(self.dependency(path) for path in dependencies)),
            self.project_signature() if whole_project else None)
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        try:
            folder = self.path.parent
            new_folder = not folder.is_dir()
            folder.mkdir(parents=True, exist_ok=True)
            if new_folder:
                write_markers(folder)
            # Entries not looked up this run go back as they were read (checked when used).
            entries = {**self.unchecked,
                       **{display: entry.to_json() for display, entry in self.entries.items()}}
            write_json(self.path, {"format": FORMAT, "entries": entries,
                                   "digests": self.digests})
        except Exception:  # noqa: BLE001 - read-only tree, full disk: run without a cache
            pass


def note_once(message: str) -> None:
    """A line on stderr, given once per process."""
    if message not in _notes_given:
        _notes_given.add(message)
        print(message, file=sys.stderr)


def project_signature(roots: list[Path], config_root: Path,
                      environment_entries: dict[Path, set[str]] | None = None) -> str:
    """What `Project.source_files` scans, summarised: walked the same way (in an
    environment folder, only the entries being linted: `environment_entries`), capped the
    same way; and the configs the training setup would read at their default places (one
    added there changes CKP601's answers)."""
    summary = hashlib.blake2b(digest_size=16)
    for path in default_place_configs(config_root):
        try:
            info = path.stat()
        except OSError:
            continue
        summary.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode(
            "utf-8", "surrogateescape"))
    count = 0
    for root in roots:
        stack = [str(root)]
        linted = (environment_entries or {}).get(root)
        while stack:  # depth first, sorted: the order of os.walk in bindings
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
            except OSError:
                continue
            if linted is not None and folder == str(root):
                entries = [entry for entry in entries if entry.name in linted]
            folders = []
            for entry in entries:
                name = entry.name
                try:
                    if entry.is_dir():
                        if name not in SKIPPED_DIRS and not name.startswith("."):
                            folders.append(entry.path)
                        continue
                    if not name.endswith(".py"):
                        continue
                    info = entry.stat()
                except OSError:
                    continue
                count += 1
                summary.update(f"{entry.path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode(
                    "utf-8", "surrogateescape"))
            if count > MAX_PROJECT_FILES:
                break
            stack.extend(reversed(folders))
    return summary.hexdigest()
