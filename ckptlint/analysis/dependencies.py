"""Which files one linted file's findings depend on: the result cache's cross-file key.

While the engine analyses a file it keeps a recording open (`recording`); the project records
every path it looks at to resolve a name, found or not (`Project.module_at`, `module_path`,
`may_bind`). Analyses that keep answers for the whole run (the binding model, the segment
builder, the rules' memo) keep them with `cached`: an answer remembers the files looked at
while it was computed, and records them again each time it is reused, so a file that gets a
kept answer depends on the same files as the file that computed it. No rule has to say what
it looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

_PENDING = object()


class DependencyRecorder:
    def __init__(self) -> None:
        self._open: list[set[Path]] = []  # innermost last; each is merged into the one below

    @contextmanager
    def recording(self) -> Iterator[set[Path]]:
        """Collect the paths recorded inside the block (they also count for any outer one)."""
        paths: set[Path] = set()
        self._open.append(paths)
        try:
            yield paths
        finally:
            self._open.pop()
            if self._open:
                self._open[-1] |= paths

    def record(self, path: Path) -> None:
        if self._open:
            self._open[-1].add(path)

    def record_all(self, paths: Iterable[Path]) -> None:
        if self._open:
            self._open[-1].update(paths)

    def cached(self, answers: dict[K, tuple[T, tuple[Path, ...]]], key: K,
               compute: Callable[[], T], *, while_computing: Any = _PENDING) -> T:
        """`answers[key]`, computed once with `compute()`; the paths it looked at are recorded
        on every use. `while_computing`: what a call for the same key made during `compute`
        gets (for cycles, such as classes that are their own bases); without it such a call
        computes again."""
        kept = answers.get(key)
        if kept is None:
            if while_computing is not _PENDING:
                answers[key] = (while_computing, ())
            with self.recording() as paths:
                value = compute()
            answers[key] = kept = (value, tuple(paths))
        else:
            self.record_all(kept[1])
        return kept[0]
