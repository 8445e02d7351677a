"""One file through the pipeline: read → prefilter → `ast` confirmation → libcst analysis.

The engine knows no individual rule: it loads the classes the registry lists
(`ckptlint.registry`), gives site rules every site, builds each site's segment once and gives
segment rules every segment, all with one typed context per run (`ckptlint.checks.context`).

Cost model (docs/performance.md): most files fail the text prefilter (`ckptlint.screen.prefilter`)
and cost a read; a candidate is parsed by CPython's `ast` (which also keeps what CPython rejects
away from libcst) and confirmed against the API table (`ckptlint.screen.confirm`); only a
confirmed file is parsed by libcst, which is imported then and not before.

Syntax errors are reported (CKP999) for every file that reaches the `ast` parse, that is every
file that mentions a checkpoint API; a file the prefilter rejects is not parsed at all. A
syntax check of every file would cost several times the whole budget (5 s for the 2,300 torch
files on one core, against 1.7 s for ruff's complete run), and any general linter reports them.
"""

from __future__ import annotations

import gc
import importlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ckptlint.analysis.apis import api_table
from ckptlint.analysis.summary_store import text_digest
from ckptlint.config import Config
from ckptlint.engine.memory import release_free_memory
from ckptlint.findings import Finding, Position, SiteRecord
from ckptlint.messages import render
from ckptlint.screen.prefilter import Prefilter
from ckptlint.syntax.notebook import decode_file, size_limit
from ckptlint.syntax.reading import (
    Limits,
    SourceError,
    StatementStarts,
    check_nodes,
    parse_ast,
    read_bytes,
    statement_starts,
)

if TYPE_CHECKING:  # the cache module is loaded only when a run uses the cache
    from ckptlint.analysis.phases import PhaseFinder
    from ckptlint.engine.cache import CacheKey

PARSE_ERROR = "CKP999"
PARSE_ERROR_MESSAGE = "{error}"
# The parsed modules kept from one analysed file to the next, in characters of their texts
# (a libcst tree takes some 25 bytes a character): past it, `Linter.bound_parsed` keeps those
# the most analysed files reached, up to two thirds of it. On diffusers (2 workers) each
# worker reaches about 3M characters: at 2.5M one of them drops modules once or twice near
# the end, and the process tree's peak went from 378-386 to 345-363 MiB with no CPU time
# measurably added (three pairs, round-robin; docs/performance.md).
PARSED_BUDGET = 2_500_000



class Linter:
    """Lints files of one project with one configuration."""

    def __init__(self, config: Config) -> None:
        from ckptlint.analysis.project import Project

        self.config = config
        self.enabled = config.enabled_codes()
        self.prefilter = Prefilter(config)
        self.project = Project(list(config.import_roots), display_base=Path.cwd(),
                               limits=Limits(config.max_file_size, config.max_analysis_nodes))
        self._analysis = None
        self._confirmer = None
        self._reached: Counter[Path] = Counter()  # parsed module -> analysed files reaching it
        # Set for a whole run (`Run.execute`): what survives a file's analysis (parsed
        # modules kept, answers kept for the run) is frozen, out of the cyclic collector's
        # reach; else each full collection walks all of it again (two seconds each on
        # diffusers). Nothing frozen is cyclic garbage later: dropped modules unlink their
        # scopes (`SourceModule.release`), and the rest goes by reference counting.
        self.freeze_between_files = False
        # Files the screening confirmed, by path: the digest of the text it confirmed and
        # that text's statement starts. Their analysis (here, or in workers forked after the
        # screening) skips the text tests, CPython's parse and the confirmation while the
        # text is the same.
        self.screened: dict[Path, Screened] = {}

    @property
    def analysis(self):
        """Rules and resolver, created when the first file is confirmed to hold a site."""
        if self._analysis is None:
            self._analysis = Analysis(self.config, self.project, self.enabled)
        return self._analysis

    @property
    def analysis_started(self) -> bool:
        return self._analysis is not None

    @property
    def confirmer(self):
        if self._confirmer is None:
            from ckptlint.screen.confirm import SiteConfirmer

            self._confirmer = SiteConfirmer(api_table(dict(self.config.checkpoint_functions)),
                                            self.config.segment_base_classes,
                                            self.is_project_module, self.hand_rolled_classes)
        return self._confirmer

    def is_project_module(self, dotted: str) -> bool:
        """Is a dotted name a module of the project (the confirmation follows names spelled
        like an API into them)? The paths probed are dependencies of the file asking."""
        return self.project.module_path(dotted) is not None

    def hand_rolled_classes(self) -> frozenset[str]:
        """The project classes that may be hand-written checkpoints (a whole-project text
        scan, made when the first file calling `.apply` asks)."""
        from ckptlint.analysis.textindex import text_index

        return text_index(self.project).hand_rolled_classes()

    def asks_project_classes(self, text: str) -> bool:
        """Does the screens' answer for this text depend on the project's classes (a name is
        written before `.apply`)?"""
        from ckptlint.screen.confirm import applied_names

        return bool(applied_names(text))

    def may_hold_site(self, path: Path, text: str) -> bool:
        """The text tests: trigger words (`Prefilter`), then the import/attribute test; or
        `.apply` on a project class that may be a hand-written checkpoint.

        A stub (`.pyi`) never does: it declares, it never runs, so nothing in it is ever
        checkpointed.
        """
        if path.suffix == ".pyi":
            return False
        return ((self.prefilter.may_contain_site(text) and self.confirmer.may_hold_site_text(
            text, self.project.module_name(path)[0]))
            or self.confirmer.applies_project_class(text))

    def read(self, path: Path) -> str:
        """The file's Python text (a notebook's code cells joined), or a SourceError."""
        max_size = self.config.max_file_size
        return decode_file(path, read_bytes(path, size_limit(path, max_size)), max_size)

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
        screened = self.screened.pop(path, None) if analyse else None
        starts = screened.starts if screened is not None and screened.holds(text) else None
        if starts is None and not self.may_hold_site(path, text):
            return FileResult(display, text, whole_project=self.asks_project_classes(text))
        result = self.check_candidate(path, display, text, analyse=analyse, starts=starts)
        result.text = text
        return result

    def check_candidate(self, path: Path, display: str, text: str, *, analyse: bool = True,
                        starts: StatementStarts | None = None) -> FileResult:
        """A file that passed the prefilter: `ast` parse, confirmation, libcst analysis
        (unless not `analyse`: then a confirmed file comes back `confirmed` and unanalysed,
        with its `starts`). Given the `starts` the screening found, the file is confirmed
        already: straight to the analysis.

        Never raises: whatever goes wrong becomes this file's CKP999 finding.
        """
        # Parsers allocate millions of acyclic objects: the cyclic collector running all the
        # while costs about half of `ast.parse` and a fifth of libcst's parse. Between files
        # of a run, what is alive is frozen (never walked again) without a collection first:
        # a file's analysis leaves no cyclic garbage worth one (tests/test_memory.py), and a
        # collection there walked every object the file left alive to find almost none
        # (0.56-0.66 s of CPU over diffusers at `-j 1`). Outside a run, it is on again
        # between files.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._check_candidate(path, display, text, analyse, starts)
        finally:
            if collecting:
                if self.freeze_between_files:
                    gc.freeze()
                gc.enable()

    def _check_candidate(self, path: Path, display: str, text: str, analyse: bool,
                         starts: StatementStarts | None) -> FileResult:
        result = FileResult(display, text)
        try:
            if starts is None:
                # Before any parser: CPython's alone can take hundreds of megabytes.
                check_nodes(text, self.config.max_analysis_nodes)
                tree = parse_ast(text, display)
                name, is_package = self.project.module_name(path)
                result.candidate = True
                with self.project.dependencies.recording() as probed:
                    confirmed = self.confirmer.may_hold_site(tree, text, name, is_package)
                if not confirmed:
                    # It depends on which project modules exist: a cached answer must too.
                    result.dependencies = tuple(sorted(str(p) for p in probed))
                    result.whole_project = self.asks_project_classes(text)
                    return result
                starts = statement_starts(tree)
                del tree
            result.candidate = result.confirmed = True
            if not analyse:
                result.starts = starts
                return result
            with self.project.dependencies.recording() as accessed:
                self.analysis.lint_module(path, display, text, result, starts)
            self.project.summaries.flush()
            # Positions are asked for mostly by the file being analysed; kept for the next
            # ones they were a quarter of a worker's memory on diffusers.
            self.project.forget_file_state()
            own = path.resolve()
            result.dependencies = tuple(sorted(str(p) for p in accessed if p != own))
            self.bound_parsed({own, *accessed})
            release_free_memory()
        except SourceError as error:
            result.findings = [parse_error(display, str(error), error.line)]
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


    def bound_parsed(self, reached: set[Path]) -> None:
        """After a file's analysis (`reached`: the files it looked at): once the parsed modules
        kept pass `PARSED_BUDGET`, keep those the most analysed files reached, up to two
        thirds of it, and drop the others with everything derived from their trees
        (`Analysis.renewed`). A module dropped is parsed again when asked for."""
        sizes = self.project.parsed_sizes()
        self._reached.update(reached.intersection(sizes))
        if sum(sizes.values()) <= PARSED_BUDGET:
            return
        keep: set[Path] = set()
        kept = 0
        for module in sorted(sizes, key=lambda p: (-self._reached[p], sizes[p], str(p))):
            if kept + sizes[module] <= PARSED_BUDGET * 2 // 3:
                keep.add(module)
                kept += sizes[module]
        self.project.forget_parsed(keep)
        self._analysis = self.analysis.renewed()
        # No `gc.collect()` here: the trees go by reference counting, and a full collection
        # costs in proportion to the whole heap (seconds each in a long-lived process).


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
    # A confirmed file not analysed yet: `statement_starts` of CPython's tree of its text.
    starts: StatementStarts | None = None
    # The screens' answer depended on the whole project (the project classes a file calling
    # `.apply` may name): like an analysed file's, any project change invalidates it.
    whole_project: bool = False
    cacheable: bool = True


def parse_error(display: str, reason: str, line: int | None = None) -> Finding:
    """A CKP999 at the top of the file; `line`: the row of a syntax error (in `data`)."""
    data: dict = {"error": reason} if line is None else {"error": reason, "line": line}
    return Finding(PARSE_ERROR, render(PARSE_ERROR_MESSAGE, data), display, Position(1, 1),
                   Position(1, 1), data=data)


def error_result(display: str, reason: str, cacheable: bool = False) -> FileResult:
    result = FileResult(display, cacheable=cacheable)
    result.findings.append(parse_error(display, reason))
    return result


class Analysis:
    """The libcst side of the engine, imported only when some file may hold a site.

    A `RecursionError` in a rule (code nested deeper than the analysis can follow) is not
    caught here: the file's result becomes one CKP999 (`Linter.check_candidate`), as for
    one in the parser or the resolver.
    """

    def __init__(self, config: Config, project, enabled: frozenset[str]) -> None:
        from ckptlint.analysis.resolve import Resolver
        from ckptlint.checks import RULE_CLASSES
        from ckptlint.checks.base import SiteRule
        from ckptlint.checks.context import RuleContext
        from ckptlint.checks.segment_base import SegmentRule

        self.config = config
        self.project = project
        self.enabled = enabled
        self.table = api_table(dict(config.checkpoint_functions))
        self.resolver = Resolver(project)
        self.context = RuleContext.for_run(config, project, self.resolver)
        rules = [load_class(path) for path in RULE_CLASSES]
        rules = [rule(self.context) for rule in rules if rule.code in enabled]
        self.site_rules = [rule for rule in rules if isinstance(rule, SiteRule)]
        self.segment_rules = [rule for rule in rules if isinstance(rule, SegmentRule)]

    def read_setup_words(self) -> None:
        """Every project file's training-setup words, read now, when a site rule is enabled
        (they ask the setup of every site whose mode is known)."""
        if self.site_rules:
            self.context.setup_reader.read_words(self.project.source_files())

    def phases_to_index(self) -> PhaseFinder | None:
        """The phases, whose project-wide indexes (`PhaseFinder.build_indexes`) are worth
        making before analysing workers fork when a segment rule is enabled (only those ask
        the phases); else None."""
        return self.context.bindings.phases if self.segment_rules else None

    def renewed(self) -> Analysis:
        """A new analysis holding nothing derived from libcst trees (every answer kept by node
        or module: `Project.forget_parsed` drops modules), with this one's whole-project
        facts read from texts and `ast`: the training setup and the phases."""
        fresh = Analysis(self.config, self.project, self.enabled)
        fresh.context.setup_reader = self.context.setup_reader
        fresh.context.bindings.phases = self.context.bindings.phases
        return fresh

    def lint_module(self, path: Path, display: str, text: str, result: FileResult,
                    starts: StatementStarts | None = None) -> None:
        """`starts`: `statement_starts` of CPython's tree of `text` (else it is parsed here)."""
        from ckptlint.analysis.sites import find_sites, resolve_targets
        from ckptlint.syntax.source import load_module

        name, is_package = self.project.module_name(path)
        real = path.resolve()
        module = self.project.kept_module(real, display, name, is_package, text)
        if module is None:
            if starts is None:
                starts = statement_starts(parse_ast(text, display))
            module = load_module(real, display, name, is_package, text, starts)
            self.project.register(module)
        sites = find_sites(module, self.resolver, self.table, self.config.segment_base_classes)
        for site in sites:
            resolve_targets(site, self.resolver)
            result.sites.append(SiteRecord(site.ref, site.target_refs,
                                           site.api.qualname if site.api else site.kind.value,
                                           site.mode.value))
            for rule in self.site_rules:
                if rule.at_wrapper_calls or not site.wrapper:
                    result.findings.extend(rule.check_site(site))
        if not self.segment_rules:
            return
        segments = [self.context.segments.build(site) for site in sites
                    if site.is_segment and site.targets]
        for segment_rule in self.segment_rules:
            for segment in segments:
                result.findings.extend(segment_rule.check(segment))


ANALYSIS_MODULES = ("ckptlint.syntax.source", "ckptlint.analysis.sites",
                    "ckptlint.analysis.resolve", "ckptlint.checks.base")


def preload_analysis() -> None:
    """Import what `Analysis` needs (libcst, resolver, every rule) in this process.

    Called before analysing workers are forked: they then start with it all imported,
    instead of each paying the imports (about 0.2 s) again.
    """
    from ckptlint.checks import RULE_CLASSES

    for module in ANALYSIS_MODULES:
        importlib.import_module(module)
    for path in RULE_CLASSES:
        load_class(path)


def analysis_modules() -> list[str]:
    """The modules `preload_analysis` imports (libcst's users, every rule's module)."""
    from ckptlint.checks import RULE_CLASSES

    return [*ANALYSIS_MODULES, *dict.fromkeys(path.split(":")[0] for path in RULE_CLASSES)]


def load_class(path: str):
    module_name, class_name = path.split(":")
    return getattr(importlib.import_module(module_name), class_name)


@dataclass(frozen=True)
class Screened:
    """What the screening found of a confirmed file (`Linter.screened`)."""

    digest: str  # `text_digest` of the text it confirmed
    starts: StatementStarts

    def holds(self, text: str) -> bool:
        """Whether `text` is the text screened (the file may have changed since)."""
        return text_digest(text) == self.digest


@dataclass
class Examined:
    """What examining one file gave (`examine`)."""

    result: FileResult | None = None  # None for a cache hit and for a candidate not analysed
    key: CacheKey | None = None  # under which to cache it
    entry: object | None = None  # the cache's entry when the file's bytes are unchanged
    candidate: bool = False  # confirmed to hold a site, not analysed yet (`analyse=False`)
    size: int = 0  # the candidate's length (the longest are analysed first)
    text: str | None = None  # the candidate's text
    screened: Screened | None = None  # the candidate's, for its analysis

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
        data = read_bytes(path, size_limit(path, linter.config.max_file_size))
    except SourceError as error:
        return Examined(error_result(display, str(error)))
    key = None
    if cache is not None and info is not None:
        from ckptlint.storage.file_signature import signature

        file_digest, entry = cache.lookup_bytes(display, path, info, data)
        key = (signature(info), file_digest)
        if entry is not None:
            return Examined(key=key, entry=entry)
    try:
        text = decode_file(path, data, linter.config.max_file_size)
    except SourceError as error:
        return Examined(error_result(display, str(error), cacheable=True), key=key)
    result = linter.lint_text(path, display, text, analyse=analyse)
    if result.confirmed and not analyse:
        return Examined(key=key, candidate=True, size=len(text), text=text,
                        screened=Screened(text_digest(text), result.starts or []))
    return Examined(result, key=key)
