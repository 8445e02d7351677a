"""The lint pipeline: files → prefilter → confirm → parse → sites → targets → rules → suppressions.

The engine knows no individual rule: it loads the classes listed in `ckptlint.rules`, gives
site rules every site, and leaves the rest to them.

Cost model (DESIGN.md, "Performance budgets"): most files fail the text prefilter and cost a
read; a candidate is parsed by CPython's `ast` (which also keeps what CPython rejects away from
libcst) and confirmed against the API table (`ckptlint.confirm`); only a confirmed file is
parsed by libcst, which is imported then and not before. `Run` spreads this over worker
processes (`ckptlint.pool`): screening first (in chunks, when there are many files), then the
analysis of the confirmed files; results are cached (`ckptlint.cache`).

Syntax errors are reported (CKP999) for every file that reaches the `ast` parse, that is every
file that mentions a checkpoint API; a file the prefilter rejects is not parsed at all. A
syntax check of every file would cost several times the whole budget (5 s for the 2,300 torch
files on one core, against 1.7 s for ruff's complete run), and any general linter reports them.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

from ckptlint.apis import api_table, trigger_names
from ckptlint.config import Config
from ckptlint.discover import discover
from ckptlint.findings import Finding, Position, SiteRef, TargetRef
from ckptlint.reading import (Limits, SourceError, check_nodes, decode_source, parse_ast,
                               read_bytes)

PARSE_ERROR = "CKP999"
STATS_ENV = "CKPTLINT_STATS"  # set to print what each stage did to stderr (JSON)


@dataclass(frozen=True)
class SiteRecord:
    """A checkpoint site found in a linted file (dynamic mode joins runtime calls to these)."""

    site: SiteRef
    targets: tuple[TargetRef, ...]
    api: str
    mode: str

    def to_json(self) -> dict:
        return {"site": self.site.to_json(), "targets": [t.to_json() for t in self.targets],
                "api": self.api, "mode": self.mode}

    @classmethod
    def from_json(cls, data) -> SiteRecord:
        """What `to_json` wrote, every field checked (ShapeError otherwise)."""
        from ckptlint.plain_data import member, want_list, want_str

        return cls(SiteRef.from_json(member(data, "site")),
                   tuple(TargetRef.from_json(t) for t in want_list(member(data, "targets"),
                                                                   "targets")),
                   want_str(member(data, "api"), "api"), want_str(member(data, "mode"), "mode"))


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    sites: list[SiteRecord] = field(default_factory=list)
    files: int = 0
    # Texts of linted files by reported filename (for noqa, fixes and source display); files
    # answered from the cache are read and decoded only when asked for.
    sources: MutableMapping[str, str] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)


_IDENTIFIER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class Prefilter:
    """A text test that only rejects files that cannot hold a checkpoint site: one of the
    trigger names must stand in it as a whole word."""

    def __init__(self, config: Config) -> None:
        self.names = frozenset(trigger_names(api_table(dict(config.checkpoint_functions)),
                                             config.segment_base_classes))
        # Each name contains one of these: found by `str.find` (fast), each occurrence is
        # widened to the whole word around it, which must be a name.
        self.needles = tuple(sorted(
            name for name in self.names
            if not any(other != name and other in name for other in self.names)))

    def may_contain_site(self, text: str) -> bool:
        word = _IDENTIFIER_CHARS
        size = len(text)
        for needle in self.needles:
            position = text.find(needle)
            while position >= 0:
                start, end = position, position + len(needle)
                while start and text[start - 1] in word:
                    start -= 1
                while end < size and text[end] in word:
                    end += 1
                if text[start:end] in self.names:
                    return True
                position = text.find(needle, end)
        return False


class Linter:
    """Lints files of one project with one configuration."""

    def __init__(self, config: Config) -> None:
        from ckptlint.project import Project

        self.config = config
        self.enabled = config.enabled_codes()
        self.prefilter = Prefilter(config)
        self.project = Project(list(config.import_roots), display_base=Path.cwd(),
                               limits=Limits(config.max_file_size, config.max_analysis_nodes))
        self._analysis = None
        self._confirmer = None

    @property
    def analysis(self):
        """Rules and resolver, created when the first file is confirmed to hold a site."""
        if self._analysis is None:
            self._analysis = Analysis(self.config, self.project, self.enabled)
        return self._analysis

    @property
    def confirmer(self):
        if self._confirmer is None:
            from ckptlint.confirm import SiteConfirmer

            self._confirmer = SiteConfirmer(api_table(dict(self.config.checkpoint_functions)),
                                            self.config.segment_base_classes)
        return self._confirmer

    def may_hold_site(self, path: Path, text: str) -> bool:
        """The text tests: trigger words (`Prefilter`), then the import/attribute test.

        A stub (`.pyi`) never does: it declares, it never runs, so nothing in it is ever
        checkpointed.
        """
        return (path.suffix != ".pyi" and self.prefilter.may_contain_site(text)
                and self.confirmer.may_hold_site_text(text, self.project.module_name(path)[0]))

    def read(self, path: Path) -> str:
        return decode_source(read_bytes(path, self.config.max_file_size))

    def lint_file(self, path: Path, display: str, text: str | None = None) -> FileResult:
        """One file, in this process: read (unless `text` is given), prefilter, analyse."""
        if text is None:
            try:
                text = self.read(path)
            except SourceError as error:
                return error_result(display, str(error))
        return self.lint_text(path, display, text)

    def lint_text(self, path: Path, display: str, text: str, *,
                  analyse: bool = True) -> FileResult:
        """The text tests, then `check_candidate`; the result keeps the text."""
        if not self.may_hold_site(path, text):
            return FileResult(display, text)
        result = self.check_candidate(path, display, text, analyse=analyse)
        result.text = text
        return result

    def check_candidate(self, path: Path, display: str, text: str, *,
                        analyse: bool = True) -> FileResult:
        """A file that passed the prefilter: `ast` parse, confirmation, libcst analysis
        (unless not `analyse`: then a confirmed file comes back `confirmed` and unanalysed).

        Never raises: whatever goes wrong becomes this file's CKP999 finding.
        """
        # Parsers allocate millions of acyclic objects: the cyclic collector running all the
        # while costs about half of `ast.parse` and a fifth of libcst's parse. It runs again
        # between files.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._check_candidate(path, display, text, analyse)
        finally:
            if collecting:
                gc.enable()

    def _check_candidate(self, path: Path, display: str, text: str,
                         analyse: bool) -> FileResult:
        result = FileResult(display, text)
        try:
            # Before any parser: CPython's alone can take hundreds of megabytes.
            check_nodes(text, self.config.max_analysis_nodes)
            tree = parse_ast(text, display)
            name, is_package = self.project.module_name(path)
            result.candidate = True
            if not self.confirmer.may_hold_site(tree, text, name, is_package):
                return result
            del tree
            result.confirmed = True
            if not analyse:
                return result
            self.project.accessed = accessed = set()
            try:
                self.analysis.lint_module(path, display, text, result, syntax_checked=True)
            finally:
                self.project.accessed = None
            own = path.resolve()
            result.dependencies = tuple(sorted(str(p) for p in accessed if p != own))
        except SourceError as error:
            result.findings = [parse_error(display, str(error))]
            result.sites = []
        except RecursionError:
            result.findings = [parse_error(display, "nesting too deep to analyse")]
            result.sites = []
        except Exception as error:  # noqa: BLE001 - one file's failure is a result, not a crash
            result.findings = [parse_error(
                display, f"internal error while analysing: {error.__class__.__name__}: {error}"
                         " (please report it)")]
            result.sites = []
            result.cacheable = False
        return result


@dataclass
class FileResult:
    display: str
    text: str | None = None
    findings: list[Finding] = field(default_factory=list)
    sites: list[SiteRecord] = field(default_factory=list)
    # Other files the analysis looked at (absolute paths, found or not): the cache key.
    dependencies: tuple[str, ...] = ()
    candidate: bool = False  # passed the prefilter and CPython's parse
    confirmed: bool = False  # the confirmation passed: libcst analysed it
    cacheable: bool = True


def parse_error(display: str, reason: str) -> Finding:
    return Finding(PARSE_ERROR, reason, display, Position(1, 1), Position(1, 1))


def error_result(display: str, reason: str, cacheable: bool = False) -> FileResult:
    result = FileResult(display, cacheable=cacheable)
    result.findings.append(parse_error(display, reason))
    return result


class Analysis:
    """The libcst side of the engine, imported only when some file may hold a site."""

    def __init__(self, config: Config, project, enabled: frozenset[str]) -> None:
        from ckptlint.resolve import Resolver
        from ckptlint.rules import RULE_CLASSES
        from ckptlint.rules.base import RuleContext, SiteRule

        self.config = config
        self.project = project
        self.table = api_table(dict(config.checkpoint_functions))
        self.resolver = Resolver(project)
        context = RuleContext(config, project, self.resolver)
        rules = [load_class(path)(context) for path in RULE_CLASSES]
        rules = [rule for rule in rules if rule.code in enabled]
        self.site_rules = [rule for rule in rules if isinstance(rule, SiteRule)]
        self.other_rules = [rule for rule in rules if not isinstance(rule, SiteRule)]

    def lint_module(self, path: Path, display: str, text: str, result: FileResult, *,
                    syntax_checked: bool = False) -> None:
        from ckptlint.sites import find_sites, resolve_targets
        from ckptlint.source import SourceModule, parse_text

        name, is_package = self.project.module_name(path)
        tree = parse_text(text, display, syntax_checked=syntax_checked)
        module = SourceModule(path=path.resolve(), display=display, name=name,
                              is_package=is_package, text=text, tree=tree)
        self.project.register(module)
        sites = find_sites(module, self.resolver, self.table, self.config.segment_base_classes)
        for site in sites:
            resolve_targets(site, self.resolver)
            result.sites.append(SiteRecord(site.ref, site.target_refs,
                                           site.api.qualname if site.api else site.kind,
                                           site.mode))
            for rule in self.site_rules:
                result.findings.extend(rule.check_site(site))
        for rule in self.other_rules:
            result.findings.extend(rule.check_sites(sites))


def preload_analysis() -> None:
    """Import what `Analysis` needs (libcst, resolver, every rule) in this process.

    Called before analysing workers are forked: they then start with it all imported,
    instead of each paying the imports (about 0.2 s) again.
    """
    from ckptlint.rules import RULE_CLASSES

    for module in ("ckptlint.source", "ckptlint.sites", "ckptlint.resolve",
                   "ckptlint.rules.base"):
        importlib.import_module(module)
    for path in RULE_CLASSES:
        load_class(path)


def load_class(path: str):
    module_name, class_name = path.split(":")
    return getattr(importlib.import_module(module_name), class_name)


# -- whole runs ------------------------------------------------------------------------------
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
    if stdin_text is not None:  # linted here, in this process, once the roots are known
        display = stdin_filename or "-"
        if isinstance(stdin_text, bytes):
            try:
                stdin_text = decode_source(stdin_text)
            except SourceError as error:
                stdin_result = error_result(display, str(error))
        if stdin_result is None:
            stdin_result = linter.lint_file(Path(display), display, stdin_text)
    run = Run(linter, targets, jobs=jobs, use_cache=use_cache)
    file_results = run.execute() + unreadable
    if stdin_result is not None:
        file_results.insert(0, stdin_result)
    result = finish(file_results, config, ignore_noqa, sources=run.sources)
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


@dataclass
class Examined:
    """What examining one file gave (`examine`)."""

    result: FileResult | None = None  # None for a cache hit and for a candidate not analysed
    key: tuple | None = None  # (stat signature, digest) under which to cache it
    entry: object | None = None  # the cache's entry when the file's bytes are unchanged
    candidate: bool = False  # confirmed to hold a site, not analysed yet (`analyse=False`)
    size: int = 0  # the candidate's length (the longest are analysed first)
    text: str | None = None  # the candidate's text

    def for_parent(self) -> Examined | None:
        """A worker's answer: the text left behind (the parent reads it again if asked), and
        None for a file the text tests rejected and that has nothing to cache."""
        self.text = None
        result = self.result
        if result is not None:
            result.text = None
            if (self.key is None and not result.findings and not result.candidate
                    and result.cacheable):
                return None
        return self


def examine(linter: Linter, cache, path: Path, display: str, *, analyse: bool) -> Examined:
    """One file: read, look up by content in the cache, decode, text tests, `ast` parse and
    confirmation, then (`analyse`) libcst's analysis; else a confirmed file is only marked
    as a candidate for it."""
    info = None
    if cache is not None:
        try:
            info = os.stat(path)
        except OSError:
            info = None
    try:
        data = read_bytes(path, linter.config.max_file_size)
    except SourceError as error:
        return Examined(error_result(display, str(error)))
    key = None
    if cache is not None and info is not None:
        from ckptlint.cache import signature

        file_digest, entry = cache.lookup_bytes(display, path, info, data)
        key = (signature(info), file_digest)
        if entry is not None:
            return Examined(key=key, entry=entry)
    try:
        text = decode_source(data)
    except SourceError as error:
        return Examined(error_result(display, str(error), cacheable=True), key=key)
    result = linter.lint_text(path, display, text, analyse=analyse)
    if result.confirmed and not analyse:
        return Examined(key=key, candidate=True, size=len(text), text=text)
    return Examined(result, key=key)


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

    def __init__(self, linter: Linter, targets: list[tuple[Path, str]], *,
                 jobs: int | None, use_cache: bool) -> None:
        self.linter = linter
        self.config = linter.config
        self.targets = targets
        self.jobs = jobs if jobs is not None else default_jobs()
        self.use_cache = use_cache
        self.sources = SourceTexts(linter)
        self.stats: dict = {"files": len(targets), "cached": 0, "candidates": 0,
                            "confirmed": 0, "errors": 0, "jobs": self.jobs, "pool": False,
                            "screened_by_workers": False}
        self.cache = None
        self.pools: list = []
        self.preloaded = False

    def execute(self) -> list[FileResult]:
        if self.use_cache and self.targets:
            from ckptlint.cache import Cache

            self.cache = Cache.open(self.config, self.linter.project.roots)
        results: dict[int, FileResult] = {}
        keys: dict[int, tuple] = {}  # index -> (signature, digest) to store in the cache
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
            key = keys.get(index)
            if key is not None and self.cache is not None and result.cacheable:
                self.cache.store(result.display, *key, result.findings, result.sites,
                                 result.dependencies, result.confirmed)
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
        pool = (self.new_pool(len(todo)) if len(todo) >= self.CHUNKED_MIN_FILES else None)
        if pool is None:
            return (
                (index, examine(self.linter, self.cache, *self.targets[index], analyse=False))
                for index in todo)
        from ckptlint.pool import chunks

        self.stats["screened_by_workers"] = True
        for chunk in chunks([(index, *self.targets[index]) for index in todo],
                            [todo[index] for index in todo], self.jobs):
            pool.submit(chunk, analyse=False)
        screened = pool.results(each=self.preload_for_candidate)
        pool.shutdown()
        return sorted(screened.items())

    def preload_for_candidate(self, examined: Examined | None) -> None:
        """While workers screen: import libcst here once a file passes the text tests."""
        if examined is not None and (
                examined.candidate or (examined.result is not None and examined.result.candidate)):
            self.preload()

    def preload(self) -> None:
        """Import libcst and the rules here (once): workers forked later start with them."""
        if not self.preloaded:
            self.preloaded = True
            try:
                preload_analysis()
            except Exception:  # noqa: BLE001 - each worker will report it per file
                pass

    def new_pool(self, files: int, *, preload: bool = False):
        """Worker processes for `files` files (None when jobs = 1 or this system cannot start
        them); `preload`: import libcst here first, so that they start with it."""
        if self.jobs <= 1:
            return None
        if preload:
            self.preload()
        from ckptlint.pool import WorkerPool

        try:
            pool = WorkerPool(self.config, self.linter.project.roots, min(self.jobs, files),
                              len(self.targets), self.cache)
        except (OSError, ValueError, ImportError):  # no shared memory, no processes
            self.jobs = 1
            return None
        self.pools.append(pool)
        self.stats["pool"] = True
        return pool

    def absorb(self, index: int, examined: Examined | None, keys: dict) -> FileResult:
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


def lint_source(text: str, filename: str, config: Config) -> list[Finding]:
    """Findings for one file's text (editors, the flake8 plugin)."""
    return lint([], config, stdin_text=text, stdin_filename=filename).findings


def finish(file_results: Iterable[FileResult], config: Config, ignore_noqa: bool, *,
           sources: MutableMapping[str, str] | None = None) -> LintResult:
    from ckptlint.suppress import apply_suppressions

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
    findings = [relocate_outside(f, by_display) for f in findings]
    findings = [f for f in findings if f.code not in config.ignored_for_file(Path(f.filename))
                or f.code == PARSE_ERROR]
    findings = apply_suppressions(findings, result.sources, ignore_noqa,
                                  report_unused="CKP902" in enabled)
    result.findings = deduplicate(findings)
    result.sites.sort(key=lambda record: (record.site.filename, record.site.row,
                                          record.site.column))
    return result


def relocate_outside(finding: Finding, linted: dict[str, FileResult]) -> Finding:
    """A hazard in a file outside the linted set is reported at its site, naming the hazard."""
    if finding.filename in linted or finding.site is None:
        return finding
    same = linted_display(finding.filename, linted)
    if same is not None:  # a linted file reached first through an import: its display differs
        return replace(finding, filename=same)
    site = finding.site
    return replace(finding, filename=site.filename,
                   start=Position(site.row, site.column), end=Position(site.row, site.column),
                   message=f"{finding.message} (in {finding.filename}:{finding.start.row})")


def linted_display(filename: str, linted: dict[str, FileResult]) -> str | None:
    """The display under which `filename` (the same file, spelled otherwise) was linted."""
    try:
        target = Path(filename).resolve()
        for display in linted:
            if Path(display).resolve() == target:
                return display
    except OSError:
        return None
    return None


def deduplicate(findings: list[Finding]) -> list[Finding]:
    """One finding per (file, row, code), the first site in output order winning."""
    def order(finding: Finding):
        site = finding.site
        return (finding.sort_key, (site.filename, site.row, site.column) if site else ("", 0, 0))

    seen: set[tuple[str, int, str]] = set()
    unique = []
    for finding in sorted(findings, key=order):
        key = (finding.filename, finding.start.row, finding.code)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique
