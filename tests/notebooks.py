"""Real Jupyter notebooks for tests, written by Jupyter's own `nbformat` (version 4, as
Jupyter saves them: one-space indent, sorted keys, sources as lists of lines)."""

from __future__ import annotations

import nbformat
from nbformat import v4


def notebook(*cells: str | tuple[str, str], outputs: bool = True,
             language: str = "python") -> nbformat.NotebookNode:
    """A notebook opening with a markdown cell, then `cells`: code (a string) or
    (`"markdown"`, text). Each code cell gets a stream output and an image output."""
    book = v4.new_notebook()
    book.metadata["kernelspec"] = {"display_name": "Python 3", "language": language,
                                   "name": "python3" if language == "python" else language}
    book.metadata["language_info"] = {"name": language, "version": "3.11.0"}
    book.cells.append(v4.new_markdown_cell("# Training\nCheckpointed blocks, see below."))
    for count, cell in enumerate(cells, start=1):
        if isinstance(cell, tuple):
            book.cells.append(v4.new_markdown_cell(cell[1]))
            continue
        code = v4.new_code_cell(cell, execution_count=count)
        if outputs:
            code.outputs = [
                v4.new_output("stream", name="stdout", text="loss 0.25\n"),
                v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=" * 64,
                                                    "text/plain": "<Figure>"}),
            ]
        book.cells.append(code)
    nbformat.validate(book)
    return book


def notebook_json(*cells: str | tuple[str, str], **options) -> str:
    return nbformat.writes(notebook(*cells, **options))
