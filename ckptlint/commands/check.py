"""What `ckptlint check` does after linting: fixes, `--diff`, `--add-noqa`, statistics, output.

Kept out of cli.py so the command there stays a list of options. Returns the exit status:
0 no findings (or all fixed), 1 findings (with `--diff`: fixes to show), 2 errors.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from ckptlint.config import Config
from ckptlint.engine.run import LintResult
from ckptlint.findings import Finding
from ckptlint.output import OutputContext, encode_report, render
from ckptlint.output.common import statistics

HUMAN_FORMATS = ("text", "concise", "full", "grouped", "pylint")


@dataclass
class CheckOptions:
    paths: list[str]
    config: Config
    output_format: str = "text"
    force_exclude: bool = False
    stdin_text: str | None = None
    stdin_filename: str | None = None
    ignore_noqa: bool = False
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    exit_zero: bool = False
    exit_non_zero_on_fix: bool = False
    add_noqa: bool = False
    show_statistics: bool = False
    output_file: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def reading_stdin(self) -> bool:
        return self.stdin_text is not None


def note(message: str) -> None:
    click.echo(message, err=True)


def relinter(options: CheckOptions):
    """Lint one file's new text alone; only findings located in that file are kept."""
    from ckptlint.engine.linter import Linter
    from ckptlint.engine.run import finish

    def relint(filename: str, text: str) -> list[Finding]:
        linter = Linter(options.config)
        path = Path(filename)
        if not options.reading_stdin or filename != options.stdin_filename:
            linter.project.add_root_for(path)
        file_result = linter.lint_file(path, filename, text)
        file_result.findings = [f for f in file_result.findings if f.filename == filename]
        return finish([file_result], options.config, options.ignore_noqa).findings

    return relint


def relint_all(options: CheckOptions) -> LintResult:
    from ckptlint.engine.run import lint

    return lint(options.paths, options.config, force_exclude=options.force_exclude,
                stdin_text=None, stdin_filename=options.stdin_filename,
                ignore_noqa=options.ignore_noqa)


def emit(text: str, options: CheckOptions) -> None:
    data = encode_report(text)
    if options.output_file:
        path = Path(options.output_file)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def render_findings(findings: list[Finding], result: LintResult, options: CheckOptions,
                    sources: Mapping[str, str]) -> str:
    findings = result.notebooks.in_cells(findings)
    context = OutputContext(
        read_source=sources.get, read_cell=result.notebooks.read_cell,
        color=(not options.output_file and sys.stdout.isatty()
               and "NO_COLOR" not in os.environ),
        extra={"unsafe_fixes": options.unsafe_fixes, **options.extra})
    if options.show_statistics:
        rows = statistics(findings, context)
        if options.output_format in ("json", "json-lines"):
            return json.dumps(rows, indent=2) + "\n"
        width = max((len(str(row["count"])) for row in rows), default=1)
        return "".join(
            f"{str(row['count']).rjust(width)}\t{row['code']}\t"
            f"{'[*] ' if row['fixable'] else ''}{row['name']}\n" for row in rows)
    return render(options.output_format, findings, context)


def fix_hint(findings: list[Finding], options: CheckOptions) -> None:
    """ruff-style footer on stderr: how many findings `--fix` (and `--unsafe-fixes`) would fix."""
    if (options.output_format not in HUMAN_FORMATS or options.show_statistics
            or options.reading_stdin):  # editors read stdin runs: keep their stderr quiet
        return
    safe = sum(1 for f in findings if f.fix is not None and f.fix.applicability == "safe")
    unsafe = sum(1 for f in findings if f.fix is not None and f.fix.applicability == "unsafe")
    fixable = safe + (unsafe if options.unsafe_fixes else 0)
    hidden = 0 if options.unsafe_fixes else unsafe
    if fixable and hidden:
        note(f"[*] {fixable} fixable with `--fix` ({hidden} hidden fix"
             f"{'es' if hidden != 1 else ''} can be enabled with `--unsafe-fixes`).")
    elif fixable:
        flags = "`--fix --unsafe-fixes`" if options.unsafe_fixes and unsafe else "`--fix`"
        note(f"[*] {fixable} fixable with {flags}.")
    elif hidden:
        note(f"No fixes available ({hidden} hidden fix{'es' if hidden != 1 else ''} can be "
             "enabled with `--unsafe-fixes`; they change behaviour: review the diff).")


def stdin_excluded(options: CheckOptions) -> bool:
    """`--force-exclude` with `--stdin-filename`: an editor buffer of an excluded file."""
    if not (options.reading_stdin and options.force_exclude and options.stdin_filename):
        return False
    from ckptlint.engine.discover import is_excluded

    return is_excluded(Path(options.stdin_filename), options.config)


def run_check(result: LintResult, options: CheckOptions) -> int:
    if stdin_excluded(options):
        # As ruff does: nothing to report, and --fix/--add-noqa hand the text back unchanged.
        name = options.stdin_filename
        result.findings = [f for f in result.findings if f.filename != name]
        if options.fix or options.add_noqa:
            click.echo(stdin_output(options.stdin_text, result, options), nl=False)
            return 0
    if options.add_noqa:
        return do_add_noqa(result, options)
    if options.fix or options.diff:
        return do_fix(result, options)
    findings = result.findings
    emit(render_findings(findings, result, options, result.sources), options)
    fix_hint(findings, options)
    return 1 if findings and not options.exit_zero else 0


def do_fix(result: LintResult, options: CheckOptions) -> int:
    from ckptlint.fix.autofix import fix_findings, unified_diff, write_fixes

    unsafe = options.unsafe_fixes
    file_fixes, remaining = fix_findings(result.findings, result.sources, unsafe,
                                         relinter(options))
    errors = 0
    for file_fix in file_fixes:
        if file_fix.error:
            note(f"ckptlint: error: {file_fix.filename}: {file_fix.error}")
            errors += 1
    changed = [file_fix for file_fix in file_fixes if file_fix.changed]
    fixed = sum(len(file_fix.fixed) for file_fix in changed)

    if options.diff:
        # --diff writes nothing: the diff is the output (stdin: the diff of stdin).
        emit("".join(unified_diff(file_fix, result.notebooks.get(file_fix.filename))
                     for file_fix in changed), options)
        if fixed:
            note(f"Would fix {fixed} finding{'s' if fixed != 1 else ''} "
                 f"in {len(changed)} file{'s' if len(changed) != 1 else ''}.")
        else:
            hidden = not unsafe and any(f.fix is not None and f.fix.applicability == "unsafe"
                                        for f in result.findings)
            note("No fixes to apply." + (" (unsafe fixes need `--unsafe-fixes`)" if hidden
                                         else ""))
        if errors:
            return 2
        return 1 if changed else 0

    if options.reading_stdin:
        # Editors: the fixed text goes to stdout, the findings left to stderr.
        stdin_fix = next((f for f in changed if f.filename == options.stdin_filename
                          or (options.stdin_filename is None and f.filename == "-")), None)
        click.echo(stdin_output(stdin_fix.text if stdin_fix else options.stdin_text, result,
                                options), nl=False)
        left = [f for f in remaining if options.stdin_filename in (None, f.filename)]
        rendered = render_findings(left, result, options, result.sources)
        if options.output_file:
            emit(rendered, options)
        else:
            click.echo(rendered, nl=False, err=True)
        if errors:
            return 2
        if (fixed and options.exit_non_zero_on_fix) or (left and not options.exit_zero):
            return 1
        return 0

    for file_fix, problem in write_fixes(changed):
        if problem is not None:
            errors += not write_refused(file_fix.filename, problem)
            fixed -= len(file_fix.fixed)
    if changed:
        # What is left, as a fresh run sees it (cross-file findings included).
        after = relint_all(options)
        remaining, sources = after.findings, after.sources
    else:
        sources = result.sources
    emit(render_findings(remaining, result, options, sources), options)
    if fixed:
        note(f"Fixed {fixed} finding{'s' if fixed != 1 else ''} "
             f"({len(remaining)} remaining).")
    fix_hint(remaining, options)
    if errors:
        return 2
    if fixed and options.exit_non_zero_on_fix:
        return 1
    return 1 if remaining and not options.exit_zero else 0


def stdin_output(text: str | None, result: LintResult, options: CheckOptions) -> str:
    """What a stdin run hands back: the text, or for a notebook its JSON with `text` (its
    joined code cells, fixed) written into the cells."""
    from ckptlint.syntax.reading import SourceError

    display = options.stdin_filename or "-"
    notebook = result.notebooks.get(display)
    if notebook is None:
        given = result.notebooks.given.get(display)
        return given.decode("utf-8", "surrogateescape") if given is not None else text or ""
    try:
        return notebook.with_code(text or notebook.code)
    except SourceError as error:
        note(f"ckptlint: error: {display}: {error}")
        return notebook.raw


def write_refused(filename: str, problem) -> bool:
    """Say why a file was not written; whether it was refused on purpose (its findings stay:
    exit 1) rather than failed (exit 2)."""
    from ckptlint.fix.autofix import WriteRefused

    if isinstance(problem, WriteRefused):
        note(f"ckptlint: {filename}: not rewritten: {problem}")
        return True
    note(f"ckptlint: error: {filename}: {problem}")
    return False


def do_add_noqa(result: LintResult, options: CheckOptions) -> int:
    from ckptlint.fix.autofix import FileFix, add_noqa, write_fixes

    by_file: dict[str, list[Finding]] = {}
    stdin_name = options.stdin_filename or "-"
    if options.reading_stdin:
        by_file[stdin_name] = []
    for finding in result.findings:
        if finding.code in ("CKP999", "CKP902"):
            continue
        by_file.setdefault(finding.filename, []).append(finding)
    added = 0
    counts: dict[str, int] = {}
    edited: list[FileFix] = []
    for filename, findings in by_file.items():
        text = result.sources.get(filename)
        if text is None and options.reading_stdin and filename == stdin_name:
            text = options.stdin_text
        if text is None:
            continue
        new_text, count = add_noqa(text, findings)
        if options.reading_stdin and filename == stdin_name:
            click.echo(stdin_output(new_text, result, options), nl=False)
            added += count
        elif count:
            counts[filename] = count
            edited.append(FileFix(filename, text, new_text))
    errors = refused = 0
    for file_fix, problem in write_fixes(edited):
        if problem is None:
            added += counts[file_fix.filename]
        elif write_refused(file_fix.filename, problem):
            refused += 1
        else:
            errors += 1
    note(f"Added {added} noqa directive{'s' if added != 1 else ''}.")
    if errors:
        return 2
    return 1 if refused and not options.exit_zero else 0
