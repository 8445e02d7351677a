"""The lint pipeline: files → prefilter → parse → sites → targets → rules → suppressions.

The engine knows no individual rule: it loads the classes listed in `ckptlint.rules`, gives
site rules every site, and leaves the rest to them.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from ckptlint.apis import api_table, trigger_names
from ckptlint.config import Config
from ckptlint.discover import discover
from ckptlint.findings import Finding, Position, SiteRef, TargetRef
from ckptlint.source import SourceError, decode_source

PARSE_ERROR = "CKP999"


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


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    sites: list[SiteRecord] = field(default_factory=list)
    files: int = 0
    # Texts of linted files by reported filename (for noqa, fixes and source display).
    sources: dict[str, str] = field(default_factory=dict)


class Prefilter:
    """A text test that only rejects files that cannot hold a checkpoint site."""

    def __init__(self, config: Config) -> None:
        names = trigger_names(api_table(dict(config.checkpoint_functions)),
                              config.segment_base_classes)
        alternatives = "|".join(sorted(re.escape(name) for name in names))
        self.pattern = re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")

    def may_contain_site(self, text: str) -> bool:
        return self.pattern.search(text) is not None


class Linter:
    """Lints files of one project with one configuration."""

    def __init__(self, config: Config) -> None:
        from ckptlint.project import Project

        self.config = config
        self.enabled = config.enabled_codes()
        self.prefilter = Prefilter(config)
        self.project = Project(list(config.import_roots), display_base=Path.cwd())
        self._analysis = None

    @property
    def analysis(self):
        """Rules and resolver, created when the first file passes the prefilter."""
        if self._analysis is None:
            self._analysis = Analysis(self.config, self.project, self.enabled)
        return self._analysis

    def lint_file(self, path: Path, display: str, text: str | None = None) -> FileResult:
        result = FileResult(display)
        try:
            if text is None:
                try:
                    data = path.read_bytes()
                except OSError as error:
                    raise SourceError(f"cannot read: {error.strerror or error}") from None
                if len(data) > self.config.max_file_size:
                    raise SourceError(
                        f"file is larger than max-file-size ({len(data)} > "
                        f"{self.config.max_file_size} bytes); not analysed")
                text = decode_source(data)
            result.text = text
            if not self.prefilter.may_contain_site(text):
                return result
            self.analysis.lint_module(path, display, text, result)
        except SourceError as error:
            result.findings.append(parse_error(display, str(error)))
        except RecursionError:
            result.findings.append(parse_error(display, "nesting too deep to analyse"))
        return result


@dataclass
class FileResult:
    display: str
    text: str | None = None
    findings: list[Finding] = field(default_factory=list)
    sites: list[SiteRecord] = field(default_factory=list)


def parse_error(display: str, reason: str) -> Finding:
    return Finding(PARSE_ERROR, reason, display, Position(1, 1), Position(1, 1))


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

    def lint_module(self, path: Path, display: str, text: str, result: FileResult) -> None:
        from ckptlint.sites import find_sites, resolve_targets
        from ckptlint.source import SourceModule, parse_text

        name, is_package = self.project.module_name(path)
        module = SourceModule(path=path.resolve(), display=display, name=name,
                              is_package=is_package, text=text, tree=parse_text(text, display))
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


def load_class(path: str):
    module_name, class_name = path.split(":")
    return getattr(importlib.import_module(module_name), class_name)


# -- whole runs ------------------------------------------------------------------------------
def lint(paths: list[str], config: Config, *, force_exclude: bool = False,
         stdin_text: str | None = None, stdin_filename: str | None = None,
         ignore_noqa: bool = False) -> LintResult:
    """Lint files and folders (`-` reads `stdin_text`, reported as `stdin_filename`)."""
    linter = Linter(config)
    file_results: list[FileResult] = []
    targets: list[tuple[Path, str, str | None]] = []
    if stdin_text is not None:
        display = stdin_filename or "-"
        targets.append((Path(display), display, stdin_text))
        paths = [p for p in paths if p != "-"]
    if paths:
        discovery = discover(paths, config, force_exclude=force_exclude)
        for path in discovery.files:
            linter.project.add_root_for(path)
            targets.append((path, str(path), None))
    for path, display, text in targets:
        file_results.append(linter.lint_file(path, display, text))
    return finish(file_results, config, ignore_noqa)


def lint_source(text: str, filename: str, config: Config) -> list[Finding]:
    """Findings for one file's text (editors, the flake8 plugin)."""
    return lint([], config, stdin_text=text, stdin_filename=filename).findings


def finish(file_results: Iterable[FileResult], config: Config, ignore_noqa: bool) -> LintResult:
    from ckptlint.suppress import apply_suppressions

    result = LintResult()
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
