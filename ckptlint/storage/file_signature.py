"""A file's stat signature: what stands in for re-reading a file that has not changed.

Size, modification and change times (nanoseconds) and inode, as ruff keys its cache: an edit
changes the size or the modification time, and every write changes the change time, which
no user-level call can set back.
"""

from __future__ import annotations

import os

Signature = tuple[int, int, int, int]


def signature(info: os.stat_result) -> Signature:
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
