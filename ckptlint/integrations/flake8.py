"""The flake8 plugin: `flake8` reports ckptlint's findings (entry point `CKP` in
`flake8.extension`).

flake8 hands over the file's lines and an `ast` tree; the plugin lints the same text with
ckptlint (libcst) and yields flake8 tuples `(row, column0, "CKPnnn message", type)`. flake8
applies `# noqa`, `--select`/`--ignore` and `--extend-select` itself, so the plugin reports
every code the `[tool.ckptlint]` configuration (found upward from the file) enables, ignores
no `# noqa`, and never reports CKP902 (flake8 has its own notion of unused noqa). An invalid
configuration is a CKP999 at 1:1 of each file, naming the config file and the key.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from ckptlint import __version__


@lru_cache(maxsize=64)
def config_for(folder: str):
    """The configuration for files in `folder`, or the ConfigError saying why it is invalid."""
    from ckptlint.config import ConfigError, load_config

    try:
        return load_config([folder])
    except ConfigError as error:
        return error


class CkptlintPlugin:
    name = "ckptlint"
    version = __version__

    def __init__(self, tree: ast.AST, lines: Sequence[str], filename: str) -> None:
        self.tree = tree
        self.lines = lines
        self.filename = filename

    def config(self):
        """The configuration, or the ConfigError that makes it unusable."""
        path = Path(self.filename)
        folder = path.parent if self.filename not in ("stdin", "-", "") else Path.cwd()
        config = config_for(str(folder if folder.is_dir() else Path.cwd()))
        if isinstance(config, Exception):
            return config
        # flake8 selects; ckptlint only leaves out what flake8 cannot express.
        return replace(config, ignore=tuple(c for c in config.ignore) + ("CKP902",))

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        from ckptlint.engine.linter import PARSE_ERROR
        from ckptlint.engine.run import lint
        from ckptlint.output.text import site_suffix

        config = self.config()
        if isinstance(config, Exception):  # flake8 has no exit 2: each file says why
            yield 1, 0, f"{PARSE_ERROR} {config}", type(self)
            return
        text = "".join(self.lines)
        result = lint([], config, stdin_text=text, stdin_filename=self.filename,
                      ignore_noqa=True)
        for finding in result.findings:
            if finding.filename != self.filename:
                continue
            message = f"{finding.code} {finding.message}{site_suffix(finding)}"
            yield finding.start.row, finding.start.column - 1, message, type(self)
