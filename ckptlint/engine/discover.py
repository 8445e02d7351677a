"""Which files a run lints: paths expanded, excludes and git-ignored files left out.

A path that cannot be read is reported, never skipped: a missing path is kept as a file (its
read gives its CKP999), a folder that cannot be listed is kept with the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ckptlint.config import Config, relative_posix
from ckptlint.globs import glob_matches


@dataclass
class Discovery:
    files: list[Path]
    explicit: set[Path]
    unreadable: dict[Path, str] = field(default_factory=dict)  # folders not listed: why


def is_excluded(path: Path, config: Config, base: Path | None = None) -> bool:
    """Excluded by a default folder name (below `base`, the folder being walked) or a glob."""
    try:
        parts = path.relative_to(base).parts if base is not None else path.parts
    except ValueError:
        parts = path.parts
    if any(part in config.default_excludes for part in parts):
        return True
    if not config.excludes:
        return False  # (resolving every path for nothing cost 0.6 s on the torch tree)
    relative = relative_posix(path, config.root)
    if relative is None:
        relative = path.as_posix()
    return any(glob_matches(pattern, relative) for pattern in config.excludes)


def discover(paths: list[str], config: Config, force_exclude: bool = False) -> Discovery:
    """Expand the given paths into the Python files to lint, in a stable order."""
    files: list[Path] = []
    explicit: set[Path] = set()
    unreadable: dict[Path, str] = {}
    for given in paths:
        path = Path(given)
        if os.path.isdir(path):  # (False, not an error, inside a folder we may not read)
            walked, locked = walk(path, config)
            # A folder named explicitly is linted even when git ignores the folder itself
            # (asked first: linting an installed package under an ignored .venv then costs
            # no per-file query).
            if not git_ignored([path]):
                ignored = git_ignored([*walked, *locked])
                walked = [f for f in walked if f not in ignored]
                locked = {folder: why for folder, why in locked.items() if folder not in ignored}
            files.extend(walked)
            unreadable.update(locked)
        else:
            if force_exclude and is_excluded(path, config):
                continue
            files.append(path)  # missing or not: reading it tells
            explicit.add(path)
    return Discovery(list(dict.fromkeys(files)), explicit, unreadable)


def walk(folder: Path, config: Config) -> tuple[list[Path], dict[Path, str]]:
    """The Python files below `folder`, and the folders that could not be listed (why).

    A symbolic link found on the way is followed only when it leads to a place inside
    `folder`: the tree is untrusted, and a link out of it (to a home folder, to `/`) must not
    make the run read, cache or fix files the user did not name.
    """
    found: list[Path] = []
    unreadable: dict[Path, str] = {}
    seen: set[tuple[int, int]] = set()
    inside = os.path.join(os.path.realpath(folder), "")

    def visit(directory: Path) -> None:
        try:
            stat = directory.stat()
            key = (stat.st_dev, stat.st_ino)
            if key in seen:
                return  # a symlink loop or a folder reached twice
            seen.add(key)
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as error:
            unreadable[directory] = f"cannot read: {error.strerror or error}"
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                # A symlink loop or an unreadable target: a Python file that cannot be
                # read is reported (CKP999), not skipped.
                is_dir = False
            if not is_dir and not config.is_included(entry.path):
                continue
            # The folders above were checked on the way down: this name is the only new
            # part below `folder` (same answer as is_excluded(path, config, folder), without
            # building a relative path for each of the torch tree's 13,000 entries).
            if entry.name in config.default_excludes:
                continue
            path = Path(entry.path)
            if config.excludes and is_excluded(path, config, folder):
                continue
            if entry.is_symlink() and not os.path.join(os.path.realpath(path), "").startswith(
                    inside):
                continue
            if is_dir:
                visit(path)
            else:
                found.append(path)

    visit(folder)
    return found, unreadable


def git_work_tree(path: Path) -> Path | None:
    """The nearest folder at or above `path` that holds a `.git` (a folder, or a file naming
    one: worktrees, submodules); None outside git (cheap: spares resolving every file)."""
    return next((folder for folder in (path, *path.parents) if os.path.exists(folder / ".git")),
                None)


# git runs programs named in its configuration (core.fsmonitor, hooks, ssh, pagers, diff and
# filter drivers). The linted tree's `.git/config` is as untrusted as its code, and git
# searching upward from a folder inside the tree would also take a committed folder shaped
# like a bare repository for one. So git is told exactly which repository to use, from the
# work-tree root, and these settings (given last, they win over every configuration file)
# switch off what `check-ignore` could otherwise run.
GIT_SAFE_SETTINGS = ("core.fsmonitor=false", "safe.bareRepository=explicit",
                     "core.hooksPath=/dev/null", "core.sshCommand=false", "diff.external=")
# Variables that choose another repository, index or object store than the one named.
# (The user's own git configuration, GIT_CONFIG_GLOBAL and GIT_CONFIG_SYSTEM, is kept.)
GIT_KEPT_VARIABLES = frozenset({"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM"})


def git_command(work_tree: Path, *args: str) -> list[str]:
    settings = [part for setting in GIT_SAFE_SETTINGS for part in ("-c", setting)]
    return ["git", "--no-pager", *settings, f"--git-dir={work_tree / '.git'}",
            f"--work-tree={work_tree}", *args]


def git_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items()
            if not name.startswith("GIT_") or name in GIT_KEPT_VARIABLES}


def git_ignored(files: list[Path]) -> set[Path]:
    """Files git ignores (none outside a git work tree, or without git)."""
    if not files:
        return set()
    first = files[0].resolve()
    work_tree = git_work_tree(first)
    if work_tree is None:
        return set()
    # Folders resolved once each, not every file (0.15 s on 2,300 files); a file's own
    # symlink is left alone (git matches the path in the work tree, and a looping link
    # would make resolve() raise). Paths outside the work tree are not git's to answer.
    inside = os.path.join(work_tree, "")
    folders: dict[Path, str | None] = {}  # None: outside the work tree
    absolute = {}
    for f in files:
        if f.parent not in folders:
            resolved = os.path.join(f.parent.resolve(), "")
            folders[f.parent] = resolved if resolved.startswith(inside) else None
        folder = folders[f.parent]
        if folder is not None:
            absolute[folder + f.name] = f
    if not absolute:
        return set()
    import subprocess  # (here: a run over named files never asks git)

    try:
        result = subprocess.run(
            git_command(work_tree, "check-ignore", "--stdin", "-z"), cwd=work_tree,
            env=git_environment(), input="\0".join(absolute).encode("utf-8", "surrogateescape"),
            capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return set()
    if result.returncode not in (0, 1):
        return set()
    names = result.stdout.decode("utf-8", "surrogateescape").split("\0")
    return {absolute[name] for name in names if name in absolute}
