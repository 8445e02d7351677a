"""The flake8 plugin: `flake8` reports ckptlint's findings (entry point `CKP` in
`flake8.extension`).

flake8 hands over the file's lines and an `ast` tree; the plugin lints the same text with
ckptlint (libcst) and yields flake8 tuples `(row, column0, "CKPnnn message", type)`. flake8
applies `# noqa`, `--select`/`--ignore` and `--extend-select` itself, so the plugin reports
every code the `[tool.ckptlint]` configuration (found upward from the file) enables, ignores
no `# noqa`, and never reports CKP902 (flake8 has its own notion of unused noqa).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

from ckptlint import __version__


@lru_cache(maxsize=64)
def config_for(folder: str):
    from ckptlint.config import load_config

    return load_config([folder])


class CkptlintPlugin:
    name = "ckptlint"
    version = __version__

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.tree = tree
        self.lines = lines
        self.filename = filename

    def config(self):
        from ckptlint.config import ConfigError, Config

        path = Path(self.filename)
        folder = path.parent if self.filename not in ("stdin", "-", "") else Path.cwd()
        try:
            config = config_for(str(folder if folder.is_dir() else Path.cwd()))
        except ConfigError:
            config = Config()
        # flake8 selects; ckptlint only leaves out what flake8 cannot express.
        return replace(config, ignore=tuple(c for c in config.ignore) + ("CKP902",))

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        from ckptlint.engine import lint
        from ckptlint.output.text import site_suffix

        text = "".join(self.lines)
        result = lint([], self.config(), stdin_text=text, stdin_filename=self.filename,
                      ignore_noqa=True)
        for finding in result.findings:
            if finding.filename != self.filename:
                continue
            message = f"{finding.code} {finding.message}{site_suffix(finding)}"
            yield finding.start.row, finding.start.column - 1, message, type(self)
