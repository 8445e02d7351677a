"""The markers a cache folder gets when ckptlint creates it."""

from __future__ import annotations

import os
from pathlib import Path


def write_markers(folder: Path) -> None:
    """Keep the cache out of git and backups (as ruff and pytest do); new files only."""
    for name, text in ((".gitignore", "# Created by ckptlint automatically.\n*\n"),
                       ("CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n"
                                        "# This file is a cache directory tag created by "
                                        "ckptlint.\n")):
        try:
            handle = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError:
            continue
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
