"""Whole runs: discover files, screen and analyse them (in worker processes,
`ckptlint.engine.pool`), answer what the cache can (`ckptlint.engine.cache`), then suppressions
and deduplication.

`Run` spreads the per-file pipeline (`ckptlint.engine.linter`) over worker processes: screening
first (in chunks, when there are many files), then the analysis of the confirmed files.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ckptlint.analysis.apis import SiteKind
from ckptlint.analysis.text_facts import IndexFacts, index_facts_of_files
from ckptlint.config import Config
from ckptlint.engine.discover import discover
from ckptlint.engine.linter import (
    PARSE_ERROR,
    Examined,
    FileResult,
    Linter,
    error_result,
    examine,
    preload_analysis,
)
from ckptlint.engine.memory import release_free_memory
from ckptlint.findings import Finding, Position, SiteRecord
from ckptlint.syntax.notebook import Notebooks, decode_file, is_notebook
from ckptlint.syntax.reading import SourceError

if TYPE_CHECKING:  # the cache module is loaded only when a run uses the cache
    from concurrent.futures import Future

    from ckptlint.analysis.summary_store import SummaryStore
    from ckptlint.engine.cache import Cache, CacheKey
    from ckptlint.engine.pool import WorkerPool

STATS_ENV = "CKPTLINT_STATS"  # set to print what each stage did to stderr (JSON)
# Site records that switch checkpointing on elsewhere: no segment of their own to analyse.
NOT_SEGMENTS = frozenset({SiteKind.HF_ENABLE.value, SiteKind.HF_ARGS.value, SiteKind.ENTRY.value,
                          SiteKind.HAND_ROLLED.value})



@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    sites: list[SiteRecord] = field(default_factory=list)
    files: int = 0
    # Texts of linted files by reported filename (for noqa, fixes and source display); files
    # answered from the cache are read and decoded only when asked for.
    sources: MutableMapping[str, str] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    # Notebooks by reported filename: their cells, for reports and rewrites.
    notebooks: Notebooks = field(default_factory=Notebooks)


# -- whole runs ------------------------------------------------------------------------------
def skip_final_collection() -> None:
    """At exit: no last cyclic collection over everything a run kept (about two seconds
    on diffusers); the process is ending, and the memory goes with it."""
    gc.freeze()


def lint(paths: list[str], config: Config, *, force_exclude: bool = False,
         stdin_text: str | bytes | None = None, stdin_filename: str | None = None,
         ignore_noqa: bool = False, jobs: int | None = None,
         use_cache: bool = False) -> LintResult:
    """Lint files and folders (`-` reads `stdin_text`, reported as `stdin_filename`; bytes
    are decoded as a file's would be).

    `jobs`: worker processes for the candidate files (default: the CPU count; 1 runs all in
    this process). `use_cache`: read and write the result cache (the CLI's default).
    """
    started = time.perf_counter()
    atexit.unregister(skip_final_collection)  # once, however many runs this process makes
    atexit.register(skip_final_collection)
    linter = Linter(config)
    targets: list[tuple[Path, str]] = []
    stdin_result = None
    unreadable: list[FileResult] = []  # folders that could not be listed
    if stdin_text is not None:
        paths = [p for p in paths if p != "-"]
    if paths:
        discovery = discover(paths, config, force_exclude=force_exclude)
        unreadable = [error_result(str(folder), reason)
                      for folder, reason in discovery.unreadable.items()]
        folders: set[str] = set()
        for path in discovery.files:
            folder = os.path.dirname(path)
            if folder not in folders:  # the package root depends on the folder only
                folders.add(folder)
                try:
                    linter.project.add_root_for(path)
                except (OSError, RuntimeError):  # a symlink loop: reported when read
                    pass
            targets.append((path, str(path)))
    notebooks = Notebooks()
    if stdin_text is not None:  # linted here, in this process, once the roots are known
        display = stdin_filename or "-"
        text = stdin_text if isinstance(stdin_text, str) else None
        if is_notebook(display):
            data = stdin_text.encode("utf-8") if isinstance(stdin_text, str) else stdin_text
            notebooks.add_stdin(display, data)
            stdin_text, text = data, None
        if isinstance(stdin_text, bytes):
            try:
                text = decode_file(display, stdin_text, config.max_file_size)
            except SourceError as error:
                stdin_result = error_result(display, str(error))
        if stdin_result is None:
            stdin_result = linter.lint_file(Path(display), display, text)
    linter.project.name_targets(targets)
    run = Run(linter, targets, jobs=jobs, use_cache=use_cache)
    file_results = run.execute() + unreadable
    if stdin_result is not None:
        file_results.insert(0, stdin_result)
    result = finish(file_results, config, ignore_noqa, sources=run.sources)
    result.notebooks = notebooks
    run.stats["seconds"] = round(time.perf_counter() - started, 3)
    if os.environ.get(STATS_ENV):
        import resource

        own = resource.getrusage(resource.RUSAGE_SELF)
        workers = resource.getrusage(resource.RUSAGE_CHILDREN)
        run.stats["cpu_main"] = round(own.ru_utime + own.ru_stime, 3)
        run.stats["cpu_workers"] = round(workers.ru_utime + workers.ru_stime, 3)
    result.stats = run.stats
    if os.environ.get(STATS_ENV):
        print(json.dumps(run.stats), file=sys.stderr)
    return result


class Run:
    """One run over discovered files: cache, screening, then the analysis of candidates.

    Screening (read, cache lookup by content, text tests, `ast` confirmation) is done by
    workers in chunks when there are many files, else in this process. Candidates confirmed to
    hold a site are then analysed by workers forked afresh once this process has imported
    libcst (it does so while the screening still runs), so that no worker pays that import.
    """

    # From this many files not answered by the cache (and jobs > 1), workers screen them in
    # chunks, reading included; below it this process does: forking costs more than a few
    # reads. Candidates go to workers either way, even a single one: a crash in libcst's
    # native parser then costs that file a CKP999, not the run.
    CHUNKED_MIN_FILES = 32
    # While workers screen, this process (idle meanwhile) prepares the analysis once two
    # files are confirmed to hold a site (two analysing workers will run: `new_pool`, which
    # prepares it otherwise, `prepare_analysis`); once this many are, it also has the
    # phases' project-wide indexes built (`prepare_phases`): with that many sites the
    # analysing workers ask the phases of many state changes, and each would scan the
    # project's text for them itself. (diffusers: 109 files with sites, both workers
    # scanned; torch's own tree: 15, neither did.)
    PHASES_PREPARED_AT = 32

    def __init__(self, linter: Linter, targets: list[tuple[Path, str]], *,
                 jobs: int | None, use_cache: bool) -> None:
        self.linter = linter
        self.config = linter.config
        self.targets = targets
        self.jobs = jobs if jobs is not None else default_jobs()
        self.use_cache = use_cache
        self.sources = SourceTexts(linter)
        self.stats: dict = {"files": len(targets), "cached": 0, "candidates": 0,
                            "confirmed": 0, "errors": 0, "segment_sites": 0,
                            "sites_analysed": 0, "jobs": self.jobs, "pool": False,
                            "screened_by_workers": False}
        self.cache: Cache | None = None
        self.pools: list = []
        self.preloaded = False
        self.preloaded_analysis = False
        self.confirmed_while_screening = 0
        # The pool screening files, while it does (`screen`); the facts behind the phases'
        # indexes read so far, and the parts of the project's files given to its workers,
        # each with the answer to come (`prepare_phases`).
        self.screening: WorkerPool | None = None
        self.phase_facts: dict[Path, IndexFacts] | None = None
        self.phase_parts: list[tuple[list[Path], Future | None]] = []
        # The summary store analysing workers share (`share_summaries`), and the folder of
        # the one made for a run without the cache (removed at the end).
        self.shared_store: SummaryStore | None = None
        self.run_folder: str | None = None

    def execute(self) -> list[FileResult]:
        self.linter.freeze_between_files = True
        try:
            return self._execute()
        finally:
            self.linter.freeze_between_files = False
            gc.unfreeze()  # a caller's process goes on with its collector as it was
            if self.shared_store is not None:
                self.shared_store.shared = False
                if self.run_folder is not None:
                    import shutil

                    self.shared_store.close()
                    shutil.rmtree(self.run_folder, ignore_errors=True)

    def _execute(self) -> list[FileResult]:
        if self.use_cache and self.targets:
            from ckptlint.engine.cache import Cache

            project = self.linter.project
            self.cache = Cache.open(self.config, project.roots, project.environment_entries)
            if self.cache is not None and self.cache.summaries is not None:
                self.linter.project.summaries = self.cache.summaries
        results: dict[int, FileResult] = {}
        keys: dict[int, CacheKey] = {}  # index -> what to store it under in the cache
        todo: dict[int, int] = {}  # index -> size, of the files the cache cannot answer
        chunked = self.jobs > 1 and len(self.targets) >= self.CHUNKED_MIN_FILES
        for index, (path, display) in enumerate(self.targets):
            info = None
            if self.cache is not None or chunked:
                try:
                    info = os.stat(path)
                except OSError:
                    pass
            entry = (self.cache.lookup(display, path, info)
                     if self.cache is not None and info is not None else None)
            if entry is not None:
                results[index] = self.from_cache(display, path, entry)
            else:
                todo[index] = info.st_size if info is not None else 0
        try:
            for index, examined in self.examine_all(todo):
                results[index] = self.absorb(index, examined, keys)
        finally:
            for pool in self.pools:
                pool.shutdown()
        if self.pools:
            self.stats["worker_deaths"] = sum(pool.deaths for pool in self.pools)
        ordered = []
        for index in range(len(self.targets)):
            result = results[index]
            self.stats["candidates"] += result.candidate
            self.stats["confirmed"] += result.confirmed
            self.stats["errors"] += any(f.code == PARSE_ERROR for f in result.findings)
            segment_sites = [record for record in result.sites if record.api not in NOT_SEGMENTS]
            self.stats["segment_sites"] += len(segment_sites)
            self.stats["sites_analysed"] += sum(bool(record.targets) for record in segment_sites)
            key = keys.get(index)
            if key is not None and self.cache is not None and result.cacheable:
                self.cache.store(result.display, *key, result.findings, result.sites,
                                 result.dependencies, result.confirmed or result.whole_project)
            ordered.append(result)
        if self.cache is not None:
            self.cache.save()
        return ordered

    def examine_all(self, todo: dict[int, int]) -> Iterator[tuple[int, Examined]]:
        """Every file's final examination: screened, then (candidates) analysed, the longest
        first (the last analysis to start should be a short one, or one worker is left
        busy while the others idle)."""
        candidates = []
        for index, examined in self.screen(todo):
            if examined is not None and examined.candidate:
                if examined.text is not None:
                    self.sources[self.targets[index][1]] = examined.text
                if examined.screened is not None:
                    self.linter.screened[self.targets[index][0]] = examined.screened
                candidates.append((-examined.size, index))
            else:
                yield index, examined
        candidates.sort()
        pool = self.new_pool(len(candidates), preload=True) if candidates else None
        if pool is None:
            for _, index in candidates:
                yield index, examine(self.linter, self.cache, *self.targets[index], analyse=True)
            return
        for _, index in candidates:
            pool.submit([(index, *self.targets[index])], analyse=True)
        yield from pool.results().items()

    def screen(self, todo: dict[int, int]) -> Iterable[tuple[int, Examined]]:
        if len(todo) >= self.CHUNKED_MIN_FILES:
            # Known before the workers fork (screening, then analysing), the project's possible
            # hand-written checkpoint classes are scanned for once, not once per worker (a
            # large tree has files calling `.apply` in every chunk).
            self.linter.hand_rolled_classes()
        pool = (self.new_pool(len(todo)) if len(todo) >= self.CHUNKED_MIN_FILES else None)
        if pool is None:
            return (
                (index, examine(self.linter, self.cache, *self.targets[index], analyse=False))
                for index in todo)
        from ckptlint.engine.pool import chunks

        self.stats["screened_by_workers"] = True
        for chunk in chunks([(index, *self.targets[index]) for index in todo],
                            [todo[index] for index in todo], self.jobs):
            pool.submit(chunk, analyse=False)
        self.screening = pool
        screened = pool.results(each=self.on_screened)
        self.finish_phases()
        self.screening = None
        pool.shutdown()
        return sorted(screened.items())

    def on_screened(self, examined: Examined | None) -> None:
        """While workers screen: import libcst here once a file passes the text tests,
        prepare the analysis once two are confirmed, and build the phases' indexes once
        `PHASES_PREPARED_AT` are."""
        if examined is None:
            return
        if examined.candidate or (examined.result is not None and examined.result.candidate):
            self.preload()
        if examined.candidate:
            self.confirmed_while_screening += 1
            if self.confirmed_while_screening == 2:
                self.prepare_analysis()
            if self.confirmed_while_screening == self.PHASES_PREPARED_AT:
                self.prepare_phases()

    def preload(self) -> None:
        """Import libcst and the rules here (once): workers forked later start with them."""
        if not self.preloaded:
            self.preloaded = True
            try:
                preload_analysis()
            except Exception:  # noqa: BLE001 - each worker will report it per file
                pass

    def prepare_analysis(self) -> None:
        """Build here, before two analysing workers or more fork, the whole-project facts
        each of them would otherwise build for itself: the rules and the resolver
        (`Linter.analysis`), the project's text index (the subclass and decorator lists,
        the hand-written checkpoint classes), every file's training-setup words. Forked
        workers inherit them."""
        if not self.preloaded_analysis:
            self.preloaded_analysis = True
            from ckptlint.analysis.textindex import text_index

            try:
                self.share_summaries()
                analysis = self.linter.analysis  # the rules and the resolver
                text_index(analysis.project).build()
                self.linter.hand_rolled_classes()
                analysis.read_setup_words()
                self.linter.project.forget_file_state()  # not carried into every worker
            except Exception:  # noqa: BLE001 - each worker will report it per file
                pass

    def prepare_phases(self) -> None:
        """Start the phases' project-wide indexes for the analysing workers forked later
        (`prepare_analysis` first). The facts behind them are read from every project file:
        the screening workers read those of most files once done screening, this process
        those of a share meanwhile (it would otherwise read them all while the workers
        idle); `finish_phases` builds the indexes."""
        self.prepare_analysis()
        try:
            phases = self.linter.analysis.phases_to_index()
            if phases is None:
                return
            files = phases.files()
            if self.screening is None or phases.store.holds_path_facts("calls", files):
                self.phase_facts = {}  # read here, most from the store's facts by path
                return
            own = len(files) // (2 * self.screening.jobs + 1)
            rest = files[own:]
            size = max(1, -(-len(rest) // self.screening.jobs))
            for start in range(0, len(rest), size):
                part = rest[start:start + size]
                self.phase_parts.append(
                    (part, self.screening.run(index_facts_of_files, [str(p) for p in part])))
            self.phase_facts = phases.own_index_facts(files[:own])
        except Exception:  # noqa: BLE001 - each worker will report it per file
            pass

    def finish_phases(self) -> None:
        """Build the phases' indexes `prepare_phases` started, from the facts the screening
        workers read (those a worker did not give are read here)."""
        if self.phase_facts is None:
            return
        found, parts = self.phase_facts, self.phase_parts
        self.phase_facts, self.phase_parts = None, []
        try:
            phases = self.linter.analysis.phases_to_index()
            if phases is None:
                return
            for part, future in parts:
                try:
                    answers = future.result() if future is not None else None
                except Exception:  # noqa: BLE001 - a worker died or failed: read here
                    answers = None
                if answers is not None and len(answers) == len(part):
                    found.update(zip(part, answers))
                else:
                    found.update(phases.own_index_facts(part))
            phases.build_indexes(found)
            found.clear()  # the workers' answers freed before the heap is trimmed
            self.linter.project.forget_file_state()
            release_free_memory()  # before the analysing workers fork
        except Exception:  # noqa: BLE001 - each worker will report it per file
            pass

    def share_summaries(self) -> None:
        """Before two analysing workers or more fork: let them share the summary store
        (`SummaryStore.share`), the cache's or, without the cache, one made for this run in
        a temporary folder (outside the tree), so that the summaries each would make of the
        same files are made about once."""
        import tempfile

        from ckptlint.analysis.summary_store import SummaryStore

        store = self.linter.project.summaries
        if self.cache is None and self.linter.analysis_started:
            return  # its phases keep the store they were made with
        if self.cache is None:
            try:
                self.run_folder = tempfile.mkdtemp(prefix="ckptlint-run-")
            except OSError:  # no temporary folder: each worker makes its own
                return
            store = SummaryStore.for_run(Path(self.run_folder) / "summaries")
            self.linter.project.summaries = store
        store.share()
        self.shared_store = store

    def new_pool(self, files: int, *, preload: bool = False):
        """Worker processes for `files` files (None when jobs = 1 or this system cannot start
        them); `preload`: import libcst here first, so that they start with it, and, for two
        workers or more, the whole-project facts they would each build."""
        if self.jobs <= 1:
            return None
        if preload:
            self.preload()
            if min(self.jobs, files) > 1:
                self.prepare_analysis()
        from ckptlint.engine.pool import WorkerPool

        try:
            pool = WorkerPool(self.linter, min(self.jobs, files), len(self.targets),
                              self.cache)
        except (OSError, ValueError, ImportError):  # no shared memory, no processes
            self.jobs = 1
            return None
        self.pools.append(pool)
        self.stats["pool"] = True
        return pool

    def absorb(self, index: int, examined: Examined | None,
               keys: dict[int, CacheKey]) -> FileResult:
        """A file's result from its examination, here or in a worker (None: nothing found)."""
        path, display = self.targets[index]
        if examined is None:
            self.sources.later(display, path)
            return FileResult(display)
        if examined.key is not None:
            keys[index] = examined.key
            if self.cache is not None:
                self.cache.record(path, *examined.key, hit=examined.entry is not None,
                                  display=display)
        if examined.entry is not None:
            return self.from_cache(display, path, examined.entry)
        result = examined.result if examined.result is not None else FileResult(display)
        if result.text is not None:
            self.sources[display] = result.text
        elif display not in self.sources.texts:
            self.sources.later(display, path)
        return result

    def from_cache(self, display: str, path: Path, entry) -> FileResult:
        self.stats["cached"] += 1
        self.sources.later(display, path)
        return FileResult(display, findings=list(entry.findings), sites=list(entry.sites))


class SourceTexts(MutableMapping):
    """Texts by reported filename; those of cached files are read when first asked for."""

    def __init__(self, linter: Linter) -> None:
        self.linter = linter
        self.texts: dict[str, str] = {}
        self.paths: dict[str, Path] = {}

    def later(self, display: str, path: Path) -> None:
        self.paths[display] = path

    def __getitem__(self, display: str) -> str:
        if display in self.texts:
            return self.texts[display]
        if display in self.paths:
            try:
                text = self.linter.read(self.paths.pop(display))
            except (SourceError, OSError, RuntimeError):
                raise KeyError(display) from None
            self.texts[display] = text
            return text
        raise KeyError(display)

    def __setitem__(self, display: str, text: str) -> None:
        self.paths.pop(display, None)
        self.texts[display] = text

    def __delitem__(self, display: str) -> None:
        if display in self.texts:
            del self.texts[display]
        elif display in self.paths:
            del self.paths[display]
        else:
            raise KeyError(display)

    def __contains__(self, display: object) -> bool:
        try:
            self[display]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def load_all(self) -> None:
        for display in list(self.paths):
            try:
                self[display]
            except KeyError:
                pass

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        yield from list(self.texts)

    def __len__(self) -> int:
        self.load_all()
        return len(self.texts)


def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def finish(file_results: Iterable[FileResult], config: Config, ignore_noqa: bool, *,
           sources: MutableMapping[str, str] | None = None) -> LintResult:
    from ckptlint.engine.suppress import apply_suppressions

    result = LintResult()
    if sources is not None:
        result.sources = sources
    by_display: dict[str, FileResult] = {}
    for file_result in file_results:
        result.files += 1
        by_display[file_result.display] = file_result
        if file_result.text is not None:
            result.sources[file_result.display] = file_result.text
        result.sites.extend(file_result.sites)
    enabled = config.enabled_codes()
    findings = [f for r in by_display.values() for f in r.findings if f.code in enabled]
    linted = LintedFiles(by_display)
    findings = [relocate_outside(f, linted) for f in findings]
    findings = [f for f in findings if f.code not in config.ignored_for_file(Path(f.filename))
                or f.code == PARSE_ERROR]
    findings = apply_suppressions(findings, result.sources, ignore_noqa,
                                  report_unused="CKP902" in enabled)
    result.findings = deduplicate(findings)
    result.sites.sort(key=lambda record: (record.site.filename, record.site.row,
                                          record.site.column))
    return result


def relocate_outside(finding: Finding, linted: LintedFiles) -> Finding:
    """A hazard in a file outside the linted set is reported at its site, naming the hazard."""
    if finding.filename in linted.results or finding.site is None:
        return finding
    same = linted.display_of(finding.filename)
    if same is not None:  # a linted file reached first through an import: its display differs
        return replace(finding, filename=same)
    site = finding.site
    hazard = {"filename": finding.filename, "row": finding.start.row}
    return replace(finding, filename=site.filename,
                   start=Position(site.row, site.column), end=Position(site.row, site.column),
                   message=f"{finding.message} (in {finding.filename}:{finding.start.row})",
                   data={**finding.data, "hazard": hazard})


class LintedFiles:
    """The run's file results by display name, and the display under which a file spelled
    otherwise was linted (every display resolved once, when first asked: a finding in a
    module reached through an import is named as the project names it, and a run given
    absolute paths names its linted files otherwise)."""

    def __init__(self, results: dict[str, FileResult]) -> None:
        self.results = results
        self._by_path: dict[Path, str] | None = None

    def display_of(self, filename: str) -> str | None:
        if self._by_path is None:
            self._by_path = {}
            for display in self.results:
                try:
                    self._by_path.setdefault(Path(display).resolve(), display)
                except (OSError, RuntimeError):  # a loop of links
                    continue
        try:
            return self._by_path.get(Path(filename).resolve())
        except (OSError, RuntimeError):
            return None


def deduplicate(findings: list[Finding]) -> list[Finding]:
    """One segment finding per (file, row, code), the first site in output order winning;
    call-level findings (reported at their own site, with no chain: CKP1xx) per (file, row,
    column, code), so that two checkpoint calls on one line give two findings."""
    def order(finding: Finding):
        site = finding.site
        return (finding.sort_key, (site.filename, site.row, site.column) if site else ("", 0, 0))

    seen: set[tuple[str, int, int, str]] = set()
    unique = []
    for finding in sorted(findings, key=order):
        call_level = finding.site is not None and not finding.chain
        key = (finding.filename, finding.start.row,
               finding.start.column if call_level else 0, finding.code)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique
