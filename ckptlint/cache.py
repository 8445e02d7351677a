"""The result cache: per-file findings keyed by file bytes, configuration and version.

Where: `$CKPTLINT_CACHE_DIR`, else `cache-dir` from the configuration, else
`.ckptlint_cache/` next to the configuration file (or in the current folder). One file per
run key holds every file's entry; the run key digests everything outside the file that can
change its findings: the ckptlint version, the configuration fingerprint, the import roots,
the current folder (findings name files relative to it), the Python version and, when the
configuration does not pin it, the installed transformers version (CKP104 reads it).

An entry is valid when the file's bytes digest to the stored digest and every file its
analysis looked at (cross-file modules a segment reached into, and module paths it probed
and did not find) is unchanged. A file that was analysed (it holds a site) also depends on
the whole project: whether state a segment reads "is changed elsewhere" (CKP201/CKP204) is
answered by scanning every project file, so any added, removed or changed `.py` file under
the import roots invalidates those entries (and only those: they are the few with sites). A file's stat signature (size, mtime, ctime, inode) stands in
for re-reading it when unchanged, as ruff does; anything else is re-read and re-digested.

Nothing here may fail a run: an unreadable, corrupt or unwritable cache is ignored.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ckptlint import __version__
from ckptlint.atomic import write_atomic

CACHE_DIR_ENV = "CKPTLINT_CACHE_DIR"
DEFAULT_DIR_NAME = ".ckptlint_cache"
FORMAT = 1

Signature = tuple[int, int, int, int]

# The project scan of `ckptlint.bindings` (kept in step by a test): folders it skips, its cap.
PROJECT_SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "build", "dist", "__pycache__",
                                  ".tox", "node_modules", ".mypy_cache", ".pytest_cache",
                                  ".ruff_cache"})
MAX_PROJECT_FILES = 10000


def cache_dir(config) -> Path:
    from_env = os.environ.get(CACHE_DIR_ENV)
    if from_env:
        return Path(from_env)
    if config.cache_dir is not None:
        return Path(config.cache_dir)
    return Path(config.root) / DEFAULT_DIR_NAME


def signature(info: os.stat_result) -> Signature:
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def environment_fingerprint(config) -> str:
    """Settings outside the configuration that change findings."""
    parts = [f"python {sys.version_info[:2]}"]
    if config.transformers_version is None:
        parts.append(f"transformers {installed_distributions('transformers')}")
    return "; ".join(parts)


def installed_distributions(name: str) -> list[str]:
    """The `name-VERSION.dist-info` folders on sys.path (as importlib.metadata finds them,
    without importing it: the clean-file budget is 100 ms)."""
    found = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found.extend(f"{entry}/{item}" for item in names
                     if item.lower().startswith(f"{name}-")
                     and item.endswith((".dist-info", ".egg-info")))
    return sorted(found)


@dataclass
class Entry:
    display: str
    signature: Signature
    digest: str
    findings: list
    sites: list
    # (absolute path, digest or None when it did not exist or could not be read)
    dependencies: tuple[tuple[str, str | None], ...] = ()
    project: str | None = None  # the project signature, for analysed files


@dataclass
class Cache:
    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)  # by display name
    # Stat signature and digest of every file hashed (linted files and dependencies).
    digests: dict[str, tuple[Signature, str]] = field(default_factory=dict)
    roots: list[Path] = field(default_factory=list)
    changed: bool = False
    _current: dict[str, str | None] = field(default_factory=dict)  # digests seen this run
    _project: str | None = None

    @classmethod
    def open(cls, config, roots: list[Path]) -> Cache:
        key = hashlib.blake2b(repr((
            FORMAT, __version__, config.fingerprint, sorted(str(r) for r in roots),
            os.getcwd(), environment_fingerprint(config),
        )).encode(), digest_size=12).hexdigest()
        path = cache_dir(config) / f"run-{key}.pickle"
        cache = cls(path, roots=list(roots))
        try:
            with open(path, "rb") as stream:
                data = pickle.load(stream)
            if (isinstance(data, dict) and data.get("format") == FORMAT
                    and isinstance(data.get("entries"), dict)
                    and isinstance(data.get("digests"), dict)):
                cache.entries = data["entries"]
                cache.digests = data["digests"]
        except Exception:  # noqa: BLE001 - missing or corrupt: start empty
            pass
        return cache

    # -- lookups -----------------------------------------------------------------------
    def lookup(self, display: str, path: Path, info: os.stat_result) -> Entry | None:
        """The entry for this file if its stat signature and dependencies are unchanged."""
        entry = self.entries.get(display)
        if not isinstance(entry, Entry) or entry.signature != signature(info):
            return None
        self._current[str(path.absolute())] = entry.digest
        return entry if self.dependencies_unchanged(entry) else None

    def lookup_bytes(self, display: str, path: Path, info: os.stat_result,
                     data: bytes) -> tuple[str, Entry | None]:
        """The file's digest, and its entry if the bytes and dependencies are unchanged."""
        file_digest = digest(data)
        self._current[str(path.absolute())] = file_digest
        self.digests[str(path.absolute())] = (signature(info), file_digest)
        entry = self.entries.get(display)
        if (not isinstance(entry, Entry) or entry.digest != file_digest
                or not self.dependencies_unchanged(entry)):
            return file_digest, None
        entry.signature = signature(info)
        self.changed = True
        return file_digest, entry

    def dependencies_unchanged(self, entry: Entry) -> bool:
        if entry.project is not None and entry.project != self.project_signature():
            return False
        return all(self.current_digest(path) == expected for path, expected in entry.dependencies)

    def project_signature(self) -> str:
        """Paths, sizes and modification times of every project `.py` file (once per run)."""
        if self._project is None:
            self._project = project_signature(self.roots)
        return self._project

    def current_digest(self, path: str) -> str | None:
        if path in self._current:
            return self._current[path]
        try:
            info = os.stat(path)
        except OSError:
            value = None
        else:
            known = self.digests.get(path)
            if known is not None and known[0] == signature(info):
                value = known[1]
            else:
                try:
                    with open(path, "rb") as stream:
                        value = digest(stream.read())
                except OSError:
                    value = None
                else:
                    self.digests[path] = (signature(info), value)
                    self.changed = True
        self._current[path] = value
        return value

    # -- updates -----------------------------------------------------------------------
    def record(self, path: Path, file_signature: Signature, file_digest: str, *, hit: bool,
               display: str) -> None:
        """What `lookup_bytes` learnt, when a worker process called it on its own copy."""
        self._current[str(path.absolute())] = file_digest
        self.digests[str(path.absolute())] = (file_signature, file_digest)
        entry = self.entries.get(display)
        if hit and isinstance(entry, Entry) and entry.signature != file_signature:
            entry.signature = file_signature
            self.changed = True

    def store(self, display: str, file_signature: Signature, file_digest: str, findings: list,
              sites: list, dependencies: tuple[str, ...], analysed: bool) -> None:
        self.entries[display] = Entry(
            display, file_signature, file_digest, findings, sites,
            tuple((path, self.current_digest(path)) for path in dependencies),
            self.project_signature() if analysed else None)
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
            write_atomic(self.path, pickle.dumps(
                {"format": FORMAT, "entries": self.entries, "digests": self.digests},
                protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - read-only tree, full disk: run without a cache
            pass


def project_signature(roots: list[Path]) -> str:
    """What `ckptlint.bindings` scans, summarised: walked the same way, capped the same way."""
    summary = hashlib.blake2b(digest_size=16)
    count = 0
    for root in roots:
        stack = [str(root)]
        while stack:  # depth first, sorted: the order of os.walk in bindings
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
            except OSError:
                continue
            folders = []
            for entry in entries:
                name = entry.name
                try:
                    if entry.is_dir():
                        if name not in PROJECT_SKIPPED_DIRS and not name.startswith("."):
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


def write_markers(folder: Path) -> None:
    """Keep the cache out of git and backups (as ruff and pytest do)."""
    try:
        (folder / ".gitignore").write_text("# Created by ckptlint automatically.\n*\n")
        (folder / "CACHEDIR.TAG").write_text(
            "Signature: 8a477f597d28d172789f06886806bc55\n"
            "# This file is a cache directory tag created by ckptlint.\n")
    except OSError:
        pass
