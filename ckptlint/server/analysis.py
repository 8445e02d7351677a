"""One editor buffer linted as the command line would lint that file, with its text.

Runs in a process forked for it (`ckptlint.server.isolated`): nothing here knows the protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ckptlint.config import load_config
from ckptlint.findings import Finding


@dataclass(frozen=True)
class Buffer:
    """What the editor holds: a file's path and text, or a notebook's code cells."""

    path: str  # absolute
    text: str = ""
    # A notebook document: its cells in order, (kind "code"|"markdown", text) each.
    cells: tuple[tuple[str, str], ...] | None = None


def analyse(buffer: Buffer) -> list[Finding]:
    """The findings in the buffer, under the nearest `[tool.ckptlint]` of its path; in a
    notebook with their cell (1-based) and rows counting in it. ConfigError on a bad config."""
    from ckptlint.engine.linter import Linter
    from ckptlint.engine.run import finish
    from ckptlint.syntax.notebook import Notebooks, read_notebook
    from ckptlint.syntax.reading import SourceError

    config = load_config([buffer.path])
    linter = Linter(config)
    linter.project.summaries = summary_store(config)
    path = Path(buffer.path)
    try:
        linter.project.add_root_for(path)
    except (OSError, RuntimeError):
        pass
    notebooks = Notebooks()
    text = buffer.text
    if buffer.cells is not None:
        data = notebook_bytes(buffer.cells)
        notebooks.add_stdin(buffer.path, data)
        try:
            text = read_notebook(data, config.max_file_size).code
        except SourceError as error:
            from ckptlint.engine.linter import error_result

            return finish([error_result(buffer.path, str(error))], config, False).findings
    result = linter.lint_file(path, buffer.path, text)
    # A hazard in another file comes back at the checkpoint call in this one (`finish`).
    findings = finish([result], config, False, sources={buffer.path: text}).findings
    return notebooks.in_cells([f for f in findings if f.filename == buffer.path])


def summary_store(config):
    """The command line's content-keyed summary store (in its cache folder): the facts about
    the project's other files are read from it, not recomputed on each edit, and facts
    computed here serve the next analysis and the command line."""
    from ckptlint.analysis.summary_store import SummaryStore
    from ckptlint.engine.cache import cache_location

    folder, chosen = cache_location(config)
    return SummaryStore.in_cache(folder, chosen)


def notebook_bytes(cells: tuple[tuple[str, str], ...]) -> bytes:
    """A notebook document's cells as nbformat 4 JSON (what `read_notebook` reads)."""
    return json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": kind, "metadata": {}, "source": text} for kind, text in cells],
    }).encode("utf-8")
