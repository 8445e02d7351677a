"""Plain data on disk: JSON files that the tree under lint may have planted, read so that
the worst such a file can do is be ignored.

`read_json` never follows a symbolic link, never blocks on a FIFO and never reads more than
`MAX_FILE_BYTES`; it gives None for anything it cannot use. What it returns is still untrusted:
callers check every field with the `want_*` helpers, which raise `ShapeError`, and treat that
as "not there" (a cache miss), never as a failed run. JSON cannot run code, unlike a pickle.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from ckptlint.storage.atomic import write_atomic

MAX_FILE_BYTES = 256 * 1024 * 1024
# Rows, columns and sizes stored as plain data stay below this (C int range for every consumer).
MAX_INT = 2**31 - 1


class ShapeError(ValueError):
    """Plain data whose type or shape is not what the reader expects."""


def want_dict(value: Any, what: str) -> dict:
    if type(value) is not dict:
        raise ShapeError(f"{what}: expected an object")
    return value


def want_list(value: Any, what: str) -> list:
    if type(value) is not list:
        raise ShapeError(f"{what}: expected a list")
    return value


def want_str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise ShapeError(f"{what}: expected a string")
    return value


def want_int(value: Any, what: str, low: int = 0, high: int = MAX_INT) -> int:
    """An integer in [low, high] (a JSON `true` is not one)."""
    if type(value) is not int or not low <= value <= high:
        raise ShapeError(f"{what}: expected an integer in [{low}, {high}]")
    return value


def want_optional_str(value: Any, what: str) -> str | None:
    return None if value is None else want_str(value, what)


def want_strs(value: Any, what: str) -> tuple[str, ...]:
    return tuple(want_str(item, what) for item in want_list(value, what))


MAX_DEPTH = 16


def want_plain(value: Any, what: str, depth: int = 0) -> Any:
    """JSON data as `json.loads` gives it (objects with string keys, lists, strings, finite
    numbers, true/false/null), nested at most `MAX_DEPTH` deep: what `write_json` can write."""
    if depth > MAX_DEPTH:
        raise ShapeError(f"{what}: nested too deep")
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            want_str(key, what)
            want_plain(item, f"{what}.{key}", depth + 1)
    elif kind is list:
        for item in value:
            want_plain(item, what, depth + 1)
    elif kind is float:
        if not math.isfinite(value):
            raise ShapeError(f"{what}: expected a finite number")
    elif kind not in (str, int, bool, type(None)):
        raise ShapeError(f"{what}: expected JSON data")
    return value


def member(data: Any, key: str) -> Any:
    """`data[key]` of an object that must have it."""
    try:
        return want_dict(data, key)[key]
    except KeyError:
        raise ShapeError(f"{key}: missing") from None


def read_json(path: Path, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The JSON value stored in the regular file `path`; None when there is none to use
    (missing, unreadable, a symbolic link, not a regular file, too large, not JSON)."""
    data = read_regular_file(path, max_bytes)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), nested too deep
        return None


def read_regular_file(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of the regular file `path`, opened without following a symbolic link and
    without blocking; None when missing, unreadable, not a regular file or over `max_bytes`."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        handle = os.open(path, flags)
    except OSError:
        return None
    try:
        with os.fdopen(handle, "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                return None
            data = stream.read(max_bytes + 1)
    except OSError:
        return None
    return data if len(data) <= max_bytes else None


def write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    """Replace `path` by `value` as compact ASCII JSON, atomically (OSError when it cannot);
    `durable`: as `write_atomic`'s."""
    write_atomic(path, json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii"),
                 durable=durable)
