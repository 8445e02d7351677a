"""Worker processes that examine files; a worker that dies costs one file.

A task is a chunk of files, each given as (index, path, display name). A worker examines
each file as the main process would (`ckptlint.engine.linter.examine`: read, cache lookup by
content, text tests, `ast` parse and confirmation, then, for a chunk to analyse, libcst's
analysis) and sends back what it found. Workers are forked on Linux, so they start with
whatever the parent holds: ckptlint and its cache, and libcst too when the parent imported
it before forking them (`Run.preload`).

libcst's native parser can kill the process outright (docs/torch-facts.md, "Parser limits"). When
that happens the executor fails every future it still holds. A shared byte per file says
which files a worker had started and not finished: those are examined again one by one, each
in a process of its own, and the one whose process dies again becomes a CKP999 finding; the
other unfinished files go to a fresh pool. The run always ends, and every other file is
reported.

Workers also end when the main process does, however it ends (SIGKILL included): forked
workers inherit the executor's pipes from the main process and from each other, so they
would wait forever for work, or finish a long analysis, for nobody. The main process holds
the write end of one more pipe for as long as it lives; each worker closes its own copy and
watches the read end from a thread, which sees end-of-file when the main process is gone
and exits the worker at once (`watch_parent`). A pipe works on every system that forks, not
only where Linux's prctl(PR_SET_PDEATHSIG) does. (Spawned workers, where fork is not used,
hold no copy of the executor's pipes: they see them close and stop on their own.)
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

NOT_STARTED, STARTED, FINISHED = 0, 1, 2
DIED = ("the analysing process died (a crash in a native extension such as libcst's "
        "parser); this file was not analysed")

Item = tuple[int, str, str]  # (index, path, display)

_linter = None
_cache = None
_status = None
_parent_pipe: tuple[int, int] | None = None  # (read, write), made once by the main process


def _context():
    # fork: workers inherit the imported modules and start in milliseconds. Safe here: with a
    # fork context the executor starts all its workers before it starts any thread.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def parent_pipe() -> tuple[int, int]:
    """The pipe whose write end this (main) process holds until it dies."""
    global _parent_pipe
    if _parent_pipe is None:
        _parent_pipe = os.pipe()
    return _parent_pipe


def watch_parent(read_end: int, write_end: int) -> None:
    """In a forked worker: exit as soon as the process holding `write_end` is gone."""
    os.close(write_end)  # this worker's own copy: else it would keep the pipe open itself

    def wait() -> None:
        try:
            while os.read(read_end, 1):  # nothing is ever written: returns at end-of-file
                pass
        finally:
            os._exit(1)

    threading.Thread(target=wait, name="ckptlint-parent-watch", daemon=True).start()


def _initialize(linter, config, roots: list[str], target_displays: dict[str, str], cache,
                status, watch: tuple[int, int] | None) -> None:
    """`linter`: the parent's, when forked (inherited, not copied); else None, and the worker
    builds its own from `config`, `roots` and how the run reports its files."""
    global _linter, _cache, _status
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    if watch is not None:
        watch_parent(*watch)
    if linter is None:
        from ckptlint.engine.linter import Linter

        linter = Linter(config)
        linter.project.roots = [Path(root) for root in roots]
        linter.project.target_displays = target_displays
        if cache is not None and cache.summaries is not None:
            linter.project.summaries = cache.summaries
    _linter = linter
    _cache = cache
    _status = status


def _examine_chunk(items: list[Item], analyse: bool) -> list:
    """(index, what `Examined.for_parent` gives) for each file."""
    from ckptlint.engine.linter import examine

    assert _linter is not None and _status is not None
    answers = []
    for index, path, display in items:
        _status[index] = STARTED
        examined = examine(_linter, _cache, Path(path), display, analyse=analyse)
        answers.append((index, examined.for_parent()))
        _status[index] = FINISHED
    return answers


class WorkerPool:
    """Submit chunks of files; `results()` waits for the answers to all submitted so far.

    A chunk is screened (up to the `ast` confirmation: `analyse=False`) or examined in full.
    """

    def __init__(self, linter, jobs: int, size: int, cache=None) -> None:
        self.linter = linter
        self.roots = [str(root) for root in linter.project.roots]
        self.jobs = jobs
        self.cache = cache
        self.context = _context()
        self.status = self.context.RawArray("b", max(size, 1))
        self.items: dict[int, tuple[Item, bool]] = {}  # index -> (item, analyse)
        self.futures: list[tuple[list[int], Future]] = []
        self.answered: dict = {}
        self.executor: ProcessPoolExecutor | None = None
        self.launched = False  # the executor has forked its workers
        self.broken = False
        self.deaths = 0

    def _new_executor(self, workers: int) -> ProcessPoolExecutor:
        self.launched = False
        forked = self.context.get_start_method() == "fork"
        watch = parent_pipe() if forked else None
        return ProcessPoolExecutor(max_workers=workers, mp_context=self.context,
                                   initializer=_initialize,
                                   initargs=(self.linter if forked else None, self.linter.config,
                                             self.roots, self.linter.project.target_displays,
                                             self.cache, self.status, watch))

    def submit(self, items: list[tuple[int, Path, str]], *, analyse: bool) -> None:
        chunk = [(index, str(path), display) for index, path, display in items]
        for item in chunk:
            self.items[item[0]] = (item, analyse)
        if self.broken:
            return
        if self.executor is None:
            self.executor = self._new_executor(self.jobs)
        self._submit(chunk, analyse)

    def run(self, function, *args) -> Future | None:
        """`function(*args)` in a worker, after the chunks submitted so far (None when no
        worker can run it: the pool is broken, or has not started)."""
        if self.broken or self.executor is None:
            return None
        try:
            return self.executor.submit(function, *args)
        except (BrokenProcessPool, RuntimeError, OSError):
            return None

    def _submit(self, chunk: list[Item], analyse: bool) -> None:
        assert self.executor is not None
        # The first submit forks the workers. Objects frozen then are never visited by the
        # collector, in the workers either: otherwise each would copy the parent's memory
        # page by page as its collector walks it.
        freeze = not self.launched
        if freeze:
            gc.freeze()
        try:
            future = self.executor.submit(_examine_chunk, chunk, analyse)
        except (BrokenProcessPool, RuntimeError, OSError):  # broken, shut down, cannot fork
            self.broken = True
            return
        finally:
            if freeze:
                gc.unfreeze()
                self.launched = True
        self.futures.append(([item[0] for item in chunk], future))

    def results(self, each=None) -> dict:
        """Examined by file index for every file submitted since the last call; `each` is
        called with each Examined as it arrives."""
        while True:
            self._collect(each)
            unfinished = [i for i in self.items if i not in self.answered]
            if not unfinished:
                break
            self.shutdown()
            started = [i for i in unfinished if self.status[i] == STARTED]
            suspects = started or unfinished  # nothing started: the workers died at start
            for index in suspects:
                self._run_alone(index)
            rest = [i for i in unfinished if i not in suspects]
            if not rest:
                break
            self.broken = False
            self.executor = self._new_executor(min(self.jobs, len(rest)))
            for analyse in (False, True):
                same = [self.items[i][0] for i in rest if self.items[i][1] == analyse]
                for chunk in chunks(same, None, self.jobs):
                    self._submit(chunk, analyse)
        answered, self.answered, self.items = self.answered, {}, {}
        return answered

    def _collect(self, each) -> None:
        by_future = {future: indexes for indexes, future in self.futures}
        self.futures = []
        for future in as_completed(by_future):
            error = future.exception()
            if error is None:
                for index, examined in future.result():
                    self.answered[index] = examined
                    if each is not None:
                        each(examined)
            elif not isinstance(error, BrokenProcessPool):
                for index in by_future[future]:
                    self.answered.setdefault(index, self._error(
                        index, f"internal error: {error.__class__.__name__}: {error}"))

    def _run_alone(self, index: int) -> None:
        item, analyse = self.items[index]
        self.status[index] = NOT_STARTED
        executor = self._new_executor(1)
        try:
            [(_, examined)] = executor.submit(_examine_chunk, [item], analyse).result()
        except BrokenProcessPool:
            self.deaths += 1
            examined = self._error(index, DIED)
        except Exception as error:  # noqa: BLE001 - reported as this file's CKP999
            examined = self._error(index, f"internal error: {error.__class__.__name__}: "
                                          f"{error}")
        finally:
            executor.shutdown(wait=True, cancel_futures=True)
        self.answered[index] = examined

    def _error(self, index: int, reason: str):
        from ckptlint.engine.linter import Examined, error_result

        return Examined(error_result(self.items[index][0][2], reason))

    def shutdown(self) -> None:
        if self.executor is not None:
            try:
                self.executor.shutdown(wait=True, cancel_futures=True)
            except Exception:  # noqa: BLE001 - a broken pool may complain on shutdown
                pass
            self.executor = None


def chunks(items: list, sizes: list[int] | None, jobs: int) -> list[list]:
    """Items split into chunks for `jobs` workers, the largest files first and alone or
    nearly so, the smallest last and many together: the work (reading, then parsing the
    candidates) grows with a file's size, so the chunks handed out last are short ones
    and no worker is left alone with a long one. About 32 chunks a worker: enough to even
    out the load, few enough that handing them out costs little."""
    if sizes is None:
        sizes = [1] * len(items)
    order = sorted(range(len(items)), key=lambda i: -sizes[i])
    budget = max(1, sum(sizes) // (jobs * 32))
    result: list[list] = []
    chunk: list = []
    used = 0
    for i in order:
        chunk.append(items[i])
        used += max(sizes[i], 1)
        if used >= budget or len(chunk) >= 64:
            result.append(chunk)
            chunk, used = [], 0
    if chunk:
        result.append(chunk)
    return result
