"""Worker processes for the files that pass the prefilter; a worker that dies costs one file.

Each candidate file goes to a process of a `ProcessPoolExecutor` (forked on Linux, so workers
start with ckptlint already imported and libcst not yet). A worker parses the file with
CPython's `ast`, confirms that it can hold a site, and only then imports libcst and analyses
it (`Linter.check_candidate`).

libcst's native parser can kill the process outright (field-notes.md, "Parser limits"). When
that happens the executor fails every future it still holds. A shared byte per task says
which tasks a worker had started and not finished: those are run again one by one, each in a
process of its own, and the one whose process dies again becomes a CKP999 finding; tasks not
yet started go to a fresh pool. The run always ends, and every other file is reported.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

NOT_STARTED, STARTED, FINISHED = 0, 1, 2
DIED = ("the analysing process died (a crash in a native extension such as libcst's "
        "parser); this file was not analysed")

_linter = None
_status = None


def _context():
    # fork: workers inherit the imported modules and start in milliseconds. Safe here: with a
    # fork context the executor starts all its workers before it starts any thread.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _initialize(config, roots: list[str], status) -> None:
    global _linter, _status
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    from ckptlint.engine import Linter

    _linter = Linter(config)
    _linter.project.roots = [Path(root) for root in roots]
    _status = status


def _check(index: int, path: str, display: str, text: str):
    assert _linter is not None and _status is not None
    _status[index] = STARTED
    result = _linter.check_candidate(Path(path), display, text)
    result.text = None  # the parent has it
    _status[index] = FINISHED
    return result


class CandidatePool:
    """Submit candidates as they are found; `results()` waits for all of them."""

    def __init__(self, config, roots: list[Path], jobs: int, size: int) -> None:
        self.config = config
        self.roots = [str(root) for root in roots]
        self.jobs = jobs
        self.context = _context()
        self.status = self.context.RawArray("b", max(size, 1))
        self.tasks: dict[int, tuple[str, str, str]] = {}
        self.futures: dict[int, Future] = {}
        self.results_by_index: dict = {}
        self.executor: ProcessPoolExecutor | None = None
        self.broken = False
        self.deaths = 0

    def _new_executor(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=workers, mp_context=self.context,
                                   initializer=_initialize,
                                   initargs=(self.config, self.roots, self.status))

    def submit(self, index: int, path: Path, display: str, text: str) -> None:
        self.tasks[index] = (str(path), display, text)
        if self.broken:
            return
        if self.executor is None:
            self.executor = self._new_executor(self.jobs)
        try:
            self.futures[index] = self.executor.submit(_check, index, str(path), display, text)
        except (BrokenProcessPool, RuntimeError, OSError):  # broken, shut down, cannot fork
            self.broken = True

    def results(self) -> dict:
        """FileResults by task index, every submitted task answered."""
        try:
            while True:
                self._collect()
                unfinished = [i for i in self.tasks if i not in self.results_by_index]
                if not unfinished:
                    return self.results_by_index
                self._shutdown()
                started = [i for i in unfinished if self.status[i] == STARTED]
                suspects = started or unfinished  # nothing started: the workers died at start
                for index in suspects:
                    self._run_alone(index)
                rest = [i for i in unfinished if i not in suspects]
                if not rest:
                    return self.results_by_index
                self.broken = False
                self.futures = {}
                self.executor = self._new_executor(min(self.jobs, len(rest)))
                for index in rest:
                    path, display, text = self.tasks[index]
                    try:
                        self.futures[index] = self.executor.submit(_check, index, path,
                                                                   display, text)
                    except (BrokenProcessPool, RuntimeError, OSError):
                        break
        finally:
            self._shutdown()

    def _collect(self) -> None:
        if not self.futures:
            return
        wait(list(self.futures.values()))
        for index, future in self.futures.items():
            if index in self.results_by_index:
                continue
            error = future.exception()
            if error is None:
                self.results_by_index[index] = future.result()
            elif not isinstance(error, BrokenProcessPool):
                self.results_by_index[index] = self._error_result(
                    index, f"internal error: {error.__class__.__name__}: {error}")
        self.futures = {}

    def _run_alone(self, index: int) -> None:
        path, display, text = self.tasks[index]
        self.status[index] = NOT_STARTED
        executor = self._new_executor(1)
        try:
            result = executor.submit(_check, index, path, display, text).result()
        except BrokenProcessPool:
            self.deaths += 1
            result = self._error_result(index, DIED)
        except Exception as error:  # noqa: BLE001 - reported as this file's CKP999
            result = self._error_result(index, f"internal error: {error.__class__.__name__}: "
                                               f"{error}")
        finally:
            executor.shutdown(wait=True, cancel_futures=True)
        self.results_by_index[index] = result

    def _error_result(self, index: int, reason: str):
        from ckptlint.engine import FileResult, parse_error

        display = self.tasks[index][1]
        result = FileResult(display)
        result.findings.append(parse_error(display, reason))
        result.cacheable = False
        return result

    def _shutdown(self) -> None:
        if self.executor is not None:
            try:
                self.executor.shutdown(wait=True, cancel_futures=True)
            except Exception:  # noqa: BLE001 - a broken pool may complain on shutdown
                pass
            self.executor = None
