"""Writing a file in one step: readers see the old bytes or the new ones, never a mix.

The temporary file is named `.<name>.<host>-<pid>.<random>.ckptlint-tmp`: `host` is a short
digest of this machine's name and `pid` the writer's process id. A writer killed between
creating it and renaming it leaves it behind; a process's first write into a folder removes
such leftovers whose writer ran on this machine and is dead (once per folder: the summary
store writes thousands of files into one folder). Nothing else is ever removed: not a
live writer's file, not one from another machine (a shared cache folder), not a link, not a
name of another shape.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

TEMP_SUFFIX = ".ckptlint-tmp"
_TEMP_NAME = re.compile(r"\.(?P<host>[0-9a-f]{8})-(?P<pid>[1-9][0-9]{0,9})\.[a-z0-9_]+"
                        + re.escape(TEMP_SUFFIX) + r"\Z")
_NAME_KEPT = 100  # bytes of the file's own name in its temporary's (a name has at most 255)
_swept: set[Path] = set()  # folders this process has removed dead writers' temporaries from


def host_tag() -> str:
    import hashlib  # (here, as tempfile below: most runs write nothing)
    import platform

    return hashlib.blake2b(platform.node().encode(), digest_size=4).hexdigest()


def write_atomic(path: Path, data: bytes, mode: int | None = None, *,
                 durable: bool = True) -> None:
    """Replace `path` by `data` through a temporary file in the same folder.

    `mode`: permission bits for the result (a fixed file keeps its own); None leaves the
    temporary file's default. `durable`: flush the data to the disk before the rename (a
    user's file); a cache entry that a power cut leaves empty is only a miss.
    """
    import tempfile  # (here: most runs write nothing, and the import costs 4 ms)

    if path.parent not in _swept:
        remove_dead_temporaries(path.parent)
        _swept.add(path.parent)
    name = os.fsdecode(os.fsencode(path.name)[:_NAME_KEPT])
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=TEMP_SUFFIX,
                                         prefix=f".{name}.{host_tag()}-{os.getpid()}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def remove_dead_temporaries(folder: Path) -> list[str]:
    """Remove the temporaries of `write_atomic` in `folder` left by dead writers on this
    machine; the names removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    host = None
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)):
            continue
        match = _TEMP_NAME.search(entry.name)
        if match is None:
            continue
        host = host or host_tag()
        try:
            if (match["host"] != host or not entry.is_file(follow_symlinks=False)
                    or process_alive(int(match["pid"]))):
                continue
            os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.name)
    return removed


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists here (one of another user counts). On Windows,
    where `os.kill` would end the process, every writer counts as alive."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except OSError as error:
        return error.errno != errno.ESRCH
    except OverflowError:
        return False
    return True
