"""The language server: LSP over stdio with pygls.

- Diagnostics for each open Python file or notebook, from the editor's buffer (not the saved
  file), published after edits pause for `DEBOUNCE_SECONDS`.
- Each analysis runs in a forked process (`ckptlint.server.isolated`): a newer edit of the same
  document cancels the older analysis (its process is killed, its result never published), and
  an analysis that fails or dies is one CKP999 diagnostic and a log message; the server lives on.
- Code actions: each finding's fix (unsafe ones say so) and `# noqa: CODE` on its line.
- Notebooks through the LSP notebook document sync: one diagnostic list per cell.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from ckptlint import __version__
from ckptlint.findings import Finding, Position
from ckptlint.server.analysis import Buffer, analyse
from ckptlint.server.isolated import AnalysisFailed, run_isolated

# Wait this long after an edit before analysing: typing produces an edit per key.
DEBOUNCE_SECONDS = 0.1
SEVERITIES = {"error": types.DiagnosticSeverity.Error,
              "warning": types.DiagnosticSeverity.Warning,
              "info": types.DiagnosticSeverity.Information}


@dataclass
class Published:
    """What a document's diagnostics were computed from (for its code actions)."""

    version: int | None
    text: str
    findings: list[Finding]


def utf16_column(line: str, column: int) -> int:
    """LSP's character offset (UTF-16 code units) of a 1-based column counting characters."""
    prefix = line[:max(column - 1, 0)]
    return len(prefix.encode("utf-16-le")) // 2


def lsp_position(lines: list[str], position: Position) -> types.Position:
    row = position.row - 1
    line = lines[row] if 0 <= row < len(lines) else ""
    return types.Position(line=max(row, 0), character=utf16_column(line, position.column))


def lsp_range(lines: list[str], start: Position, end: Position) -> types.Range:
    if (end.row, end.column) < (start.row, start.column):
        end = start
    return types.Range(start=lsp_position(lines, start), end=lsp_position(lines, end))


def rule_url(code: str) -> str | None:
    """The rule page's published address, from ckptlint's `[project.urls]`; None when unset."""
    from ckptlint.rule_pages import docs_base, page_filename

    base = docs_base()
    return f"{base}/{page_filename(code)}" if base is not None else None


def site_uri(filename: str) -> str:
    return Path(os.path.abspath(filename)).as_uri()


def diagnostic(finding: Finding, lines: list[str]) -> types.Diagnostic:
    url = rule_url(finding.code)
    related = None
    site = finding.site
    if site is not None and (site.filename, site.row, site.cell) != (
            finding.filename, finding.start.row, finding.cell):
        via = f" via {' → '.join(finding.chain)}" if finding.chain else ""
        where = types.Range(start=types.Position(line=site.row - 1, character=site.column - 1),
                            end=types.Position(line=site.row - 1, character=site.column - 1))
        shown = f" (cell {site.cell})" if site.cell is not None else ""
        related = [types.DiagnosticRelatedInformation(
            location=types.Location(uri=site_uri(site.filename), range=where),
            message=f"checkpointed here{shown}{via}")]
    return types.Diagnostic(
        range=lsp_range(lines, finding.start, finding.end),
        message=finding.message,
        severity=SEVERITIES[finding.severity],
        code=finding.code,
        code_description=types.CodeDescription(href=url) if url else None,
        source="ckptlint",
        related_information=related,
    )


def failure_diagnostic(reason: str) -> types.Diagnostic:
    return types.Diagnostic(
        range=types.Range(start=types.Position(line=0, character=0),
                          end=types.Position(line=0, character=0)),
        message=f"ckptlint could not analyse this file: {reason}",
        severity=types.DiagnosticSeverity.Error, code="CKP999", source="ckptlint")


class CkptlintServer:
    def __init__(self) -> None:
        self.server = LanguageServer(
            "ckptlint", __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(notebook_selector=[
                types.NotebookDocumentFilterWithCells(
                    cells=[types.NotebookCellLanguage(language="python")],
                    notebook="jupyter-notebook")]))
        self.tasks: dict[str, asyncio.Task] = {}
        self.published: dict[str, Published] = {}
        self.register()

    # -- documents ---------------------------------------------------------------------
    def register(self) -> None:
        server = self.server

        @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
        def did_open(params: types.DidOpenTextDocumentParams) -> None:
            self.document_changed(params.text_document.uri)

        @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
        def did_change(params: types.DidChangeTextDocumentParams) -> None:
            self.document_changed(params.text_document.uri)

        @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
        def did_save(params: types.DidSaveTextDocumentParams) -> None:
            for key in list(self.published):  # other files' findings may follow this one
                # (a notebook is analysed by its own URI, never by its cells')
                if key != params.text_document.uri and self.notebook_of(key) is None:
                    self.schedule(key)

        @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
        def did_close(params: types.DidCloseTextDocumentParams) -> None:
            uri = params.text_document.uri
            if self.notebook_of(uri) is None:
                self.forget(uri)
                self.publish(uri, [], None)

        @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
        def notebook_open(params: types.DidOpenNotebookDocumentParams) -> None:
            self.schedule(params.notebook_document.uri)

        @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
        def notebook_change(params: types.DidChangeNotebookDocumentParams) -> None:
            self.schedule(params.notebook_document.uri)

        @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
        def notebook_close(params: types.DidCloseNotebookDocumentParams) -> None:
            self.forget(params.notebook_document.uri)
            for cell in params.cell_text_documents:
                self.publish(cell.uri, [], None)

        @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix]))
        def code_action(params: types.CodeActionParams) -> list[types.CodeAction]:
            return self.code_actions(params)

        @server.feature(types.SHUTDOWN)
        def shutdown(params: None) -> None:
            for task in self.tasks.values():
                task.cancel()

    def notebook_of(self, cell_uri: str):
        return self.server.workspace.get_notebook_document(cell_uri=cell_uri)

    def document_changed(self, uri: str) -> None:
        notebook = self.notebook_of(uri)
        self.schedule(notebook.uri if notebook is not None else uri)

    def forget(self, key: str) -> None:
        task = self.tasks.pop(key, None)
        if task is not None:
            task.cancel()
        self.published.pop(key, None)

    def schedule(self, key: str) -> None:
        """Analyse a document (a text document's or a notebook's URI) once edits pause,
        cancelling the analysis of its previous version."""
        previous = self.tasks.pop(key, None)
        if previous is not None:
            previous.cancel()
        self.tasks[key] = asyncio.ensure_future(self.analyse(key))

    async def analyse(self, key: str) -> None:
        await asyncio.sleep(DEBOUNCE_SECONDS)
        notebook = self.server.workspace.get_notebook_document(notebook_uri=key)
        buffer, version = self.buffer(key, notebook)
        self.log(f"analysing {key} (version {version})")
        try:
            findings = await run_isolated(analyse, buffer)
            failure = None
        except AnalysisFailed as error:
            findings, failure = [], str(error)
            self.log(f"analysis of {key} failed: {failure}", types.MessageType.Error)
        if self.tasks.get(key) is asyncio.current_task():
            del self.tasks[key]
        if notebook is None:
            self.published[key] = Published(version, buffer.text, findings)
            self.publish(key, findings, failure)
            return
        for number, cell in enumerate(notebook.cells, start=1):
            document = self.server.workspace.get_text_document(cell.document)
            in_cell = [f for f in findings if f.cell == number]
            if cell.kind == types.NotebookCellKind.Code:
                self.published[cell.document] = Published(document.version, document.source,
                                                           in_cell)
            self.publish(cell.document, in_cell, failure if number == 1 else None)
        self.published[key] = Published(version, "", findings)

    def buffer(self, key: str, notebook) -> tuple[Buffer, int | None]:
        if notebook is None:
            document = self.server.workspace.get_text_document(key)
            return Buffer(self.path_of(key), document.source), document.version
        cells = []
        for cell in notebook.cells:
            kind = "code" if cell.kind == types.NotebookCellKind.Code else "markdown"
            cells.append((kind, self.server.workspace.get_text_document(cell.document).source))
        return Buffer(self.path_of(key), cells=tuple(cells)), notebook.version

    @staticmethod
    def path_of(uri: str) -> str:
        path = to_fs_path(uri) if uri.startswith("file:") else None
        return os.path.abspath(path) if path else os.path.join(os.getcwd(), "untitled.py")

    def publish(self, uri: str, findings: list[Finding], failure: str | None) -> None:
        lines = (self.server.workspace.get_text_document(uri).source.splitlines()
                 if findings else [])
        diagnostics = [diagnostic(f, lines) for f in findings]
        if failure is not None:
            diagnostics.insert(0, failure_diagnostic(failure))
        published = self.published.get(uri)
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, diagnostics=diagnostics,
            version=published.version if published is not None else None))

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.server.window_log_message(types.LogMessageParams(type=kind, message=message))

    # -- code actions ------------------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        published = self.published.get(uri)
        document = self.server.workspace.get_text_document(uri)
        if published is None or published.version != document.version:
            return []  # the findings are of an older text: wait for the new ones
        lines = published.text.splitlines()
        first, last = params.range.start.line + 1, params.range.end.line + 1
        actions = []
        for finding in published.findings:
            if finding.code == "CKP999" or not (
                    finding.start.row <= last and first <= max(finding.end.row,
                                                              finding.start.row)):
                continue
            shown = diagnostic(finding, lines)
            if finding.fix is not None and finding.fix.edits:
                unsafe = finding.fix.applicability == "unsafe"
                title = f"{finding.code}: {finding.fix.message}"
                if unsafe:
                    title += " (unsafe fix: it changes behaviour, review it)"
                edits = [types.TextEdit(range=lsp_range(lines, edit.start, edit.end),
                                        new_text=edit.content) for edit in finding.fix.edits]
                actions.append(types.CodeAction(
                    title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[shown],
                    is_preferred=not unsafe,
                    edit=types.WorkspaceEdit(changes={uri: edits})))
            noqa = self.noqa_edit(published.text, finding)
            if noqa is not None:
                actions.append(types.CodeAction(
                    title=f"{finding.code}: suppress on this line (`# noqa: {finding.code}`)",
                    kind=types.CodeActionKind.QuickFix, diagnostics=[shown],
                    edit=types.WorkspaceEdit(changes={uri: [noqa]})))
        return actions

    @staticmethod
    def noqa_edit(text: str, finding: Finding) -> types.TextEdit | None:
        """The edit adding `# noqa: CODE` where `--add-noqa` would (the statement's last
        line), as a replacement of that one line."""
        from ckptlint.fix.autofix import add_noqa

        new_text, changed = add_noqa(text, [finding])
        if not changed:
            return None
        old_lines, new_lines = text.splitlines(), new_text.splitlines()
        for row, (old, new) in enumerate(zip(old_lines, new_lines)):
            if old != new:
                return types.TextEdit(range=types.Range(
                    start=types.Position(line=row, character=0),
                    end=types.Position(line=row, character=utf16_column(old, len(old) + 1))),
                    new_text=new)
        return None


def serve() -> None:
    """Run the server on stdin/stdout until the client exits it."""
    from ckptlint.engine.linter import analysis_modules
    from ckptlint.server.isolated import warm_up

    warm_up(analysis_modules())  # every analysis then starts with libcst loaded
    CkptlintServer().server.start_io()
