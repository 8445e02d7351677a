"""Jupyter notebooks (`.ipynb`, nbformat 4) as Python text, and back.

A notebook is linted as one Python text: its code cells joined in order, each ending with a
line break, with IPython syntax masked (`%magic`, `!shell`, `x = !cmd`, `obj?`, and whole
`%%cell` magics), line for line, so that rows map back to cells. Findings keep rows of that
joined text through suppression and fixing; `Notebook.locate` turns a row into (cell, row in
the cell) when they are reported, and `Notebook.with_code` writes a fixed text back into the
cells it changed, leaving every other byte of the notebook's JSON as it was.

Read with the standard `json` module only: the file is untrusted data, nothing in it runs.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from ckptlint.findings import Edit, Finding, Position
from ckptlint.syntax.reading import SourceError, decode_source, too_large

NOTEBOOK_SUFFIX = ".ipynb"
# The whole JSON (outputs, images) may be far larger than its code, to which `max-file-size`
# applies; this bounds what a notebook may make ckptlint load at all.
MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024

# A line IPython transforms before Python sees it: a line magic or shell escape, an
# assignment from one, or a help query (`obj?`, `??obj`).
_MAGIC = re.compile(r"\s*(?:%|!)")
_ASSIGNED_MAGIC = re.compile(r"(\s*[\w.,\[\]() ]+?\s*=\s*)[%!]")
_HELP = re.compile(r"\s*(?:\?{1,2}[\w.*]+|[\w.*]+\?{1,2})\s*$")
_INDENT = re.compile(r"\s*")


def is_notebook(name: object) -> bool:
    return str(name).endswith(NOTEBOOK_SUFFIX)


@dataclass(frozen=True)
class CodeCell:
    number: int  # 1-based among all cells (markdown included), as Jupyter counts them
    index: int  # position in the notebook's `cells`
    first_row: int  # its first row in the joined text
    lines: tuple[str, ...]  # its source lines as written (line breaks kept)
    masked: tuple[str, ...]  # the same lines as linted

    @property
    def rows(self) -> int:
        return len(self.lines)


@dataclass
class Notebook:
    raw: str  # the JSON text as read
    data: dict[str, Any]
    cells: tuple[CodeCell, ...]
    code: str  # the joined, masked code cells: what is linted

    def locate(self, row: int) -> tuple[int, int]:
        """(cell number, row in that cell) of a row of the joined text."""
        if not self.cells:
            return 1, row
        for cell in reversed(self.cells):
            if row >= cell.first_row:
                return cell.number, min(row - cell.first_row + 1, max(cell.rows, 1))
        return self.cells[0].number, 1

    def cell_text(self, number: int) -> str | None:
        """A code cell's source as written (for showing it)."""
        for cell in self.cells:
            if cell.number == number:
                return "".join(cell.lines)
        return None

    def split(self, code: str) -> dict[int, str]:
        """The source of each code cell in `code`, an edited `self.code`: lines matched to
        the cell they came from; lines an edit added go with the line before them; masked
        lines left alone come back as written."""
        old = [line for cell in self.cells for line in cell.masked]
        original = [line for cell in self.cells for line in cell.lines]
        owner = [cell.index for cell in self.cells for _ in cell.lines]
        new = code.splitlines(keepends=True)
        sources: dict[int, list[str]] = {cell.index: [] for cell in self.cells}
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
        for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
            if tag == "equal":
                for offset in range(old_end - old_start):
                    sources[owner[old_start + offset]].append(original[old_start + offset])
                continue
            target = owner[old_start] if old_start < old_end else (
                owner[old_start - 1] if old_start else owner[0])
            sources[target].extend(new[new_start:new_end])
        return {index: "".join(lines) for index, lines in sources.items()}

    def with_code(self, code: str) -> str:
        """The notebook's JSON text with the cells `code` changed rewritten, in the file's
        own formatting (indent, key order, escaping, final line break); every other cell,
        output and metadata as it was. SourceError when that formatting cannot be kept."""
        if code == self.code:
            return self.raw
        dump = json_style(self.raw, self.data)
        sources = self.split(code)
        for cell in self.cells:
            entry = self.data["cells"][cell.index]
            old = source_text(entry)
            new = sources[cell.index]
            if new.endswith("\n") and old and not old.endswith(("\n", "\r")):
                new = new[:-1]  # the line break the join added
            if new == old:
                continue
            entry["source"] = new.splitlines(keepends=True) if isinstance(
                entry["source"], list) else new
        return dump(self.data)


def source_text(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def json_style(raw: str, data: Any):
    """A function writing data as `raw` was written (indent, ASCII escapes, final line break):
    the first of the styles nbformat and editors use that gives `raw` back exactly."""
    first_break = raw.find("\n")
    indent: int | str | None = None
    if 0 <= first_break < len(raw) - 1 and raw[first_break + 1:].strip():
        following = raw[first_break + 1:]
        indent = following[:len(following) - len(following.lstrip(" \t"))] or 0
        if isinstance(indent, str) and set(indent) == {" "}:
            indent = len(indent)
    ending = raw[len(raw.rstrip()):]
    for ascii_only in (False, True):
        for separators in ((",", ": "), (", ", ": "), (",", ":")):
            def dump(value: Any, ascii_only=ascii_only, separators=separators) -> str:
                return json.dumps(value, indent=indent, ensure_ascii=ascii_only,
                                  separators=separators) + ending
            if dump(data) == raw:
                return dump
    raise SourceError("the notebook's JSON formatting could not be reproduced, so a rewrite "
                      "would change more than the fixed cells; not rewritten")


def mask(lines: list[str]) -> list[str]:
    """The lines Python sees: IPython syntax replaced, line for line, by `pass` (at the
    line's indentation) or, for an assignment from a magic, by `... = None`; a `%%` cell
    magic makes the whole cell blank lines."""
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("%%"):
        return [ending_of(line) for line in lines]
    masked = []
    continued: str | None = None  # the indentation of a magic continued with a backslash
    for line in lines:
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        if continued is not None:
            masked.append(f"{continued}pass{ending}")
        elif _MAGIC.match(body) or _HELP.match(body):
            indent = _INDENT.match(body).group()  # type: ignore[union-attr]
            masked.append(f"{indent}pass{ending}")
        elif (assigned := _ASSIGNED_MAGIC.match(body)) is not None:
            masked.append(f"{assigned.group(1)}None{ending}")
        else:
            masked.append(line)
            continue
        continued = (_INDENT.match(body).group()  # type: ignore[union-attr]
                     if body.endswith("\\") else None)
    return masked


def ending_of(line: str) -> str:
    return line[len(line.rstrip("\r\n")):]


def read_notebook(data: bytes, max_code_size: int = 0) -> Notebook:
    """The notebook in `data`, or a SourceError naming what is wrong with it; `max_code_size`
    (`max-file-size`) limits its code cells' text."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise SourceError(f"notebook is larger than {MAX_NOTEBOOK_BYTES} bytes; not analysed")
    try:
        raw = data.decode("utf-8-sig")
        parsed = json.loads(raw)
    except UnicodeDecodeError as error:
        raise SourceError(f"invalid notebook: cannot decode as utf-8 ({error})") from None
    except json.JSONDecodeError as error:
        raise SourceError(f"invalid notebook JSON: {error.msg} (line {error.lineno}, "
                          f"column {error.colno})") from None
    except RecursionError:
        raise SourceError("invalid notebook JSON: nested too deep") from None
    if not isinstance(parsed, dict):
        raise SourceError("invalid notebook: expected a JSON object")
    if parsed.get("nbformat") != 4:
        raise SourceError(f"invalid notebook: nbformat {parsed.get('nbformat')!r} is not "
                          "supported (nbformat 4 is)")
    cells = parsed.get("cells")
    if not isinstance(cells, list):
        raise SourceError("invalid notebook: key `cells`: expected a list")
    code_cells = []
    row = 1
    python = is_python(parsed.get("metadata"))
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise SourceError(f"invalid notebook: cell {index + 1}: expected an object")
        source = cell.get("source", "")
        if not (isinstance(source, str) or (isinstance(source, list)
                                             and all(isinstance(s, str) for s in source))):
            raise SourceError(f"invalid notebook: cell {index + 1}: key `source`: expected a "
                              "string or a list of strings")
        if cell.get("cell_type") != "code" or not python:
            continue
        lines = source_text(cell).splitlines(keepends=True)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        code_cells.append(CodeCell(index + 1, index, row, tuple(lines), tuple(mask(lines))))
        row += len(lines)
    code = "".join(line for cell in code_cells for line in cell.masked)
    size = len(code.encode("utf-8", "surrogatepass"))
    if max_code_size and size > max_code_size:
        raise SourceError(f"code cells: {too_large(size, max_code_size)}")
    return Notebook(raw, parsed, tuple(code_cells), code)


def is_python(metadata: Any) -> bool:
    """Whether the notebook's kernel runs Python (unstated: assumed)."""
    if not isinstance(metadata, dict):
        return True
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        info = metadata.get(key)
        if isinstance(info, dict) and isinstance(info.get(field), str):
            return info[field].lower() == "python"
    return True


def size_limit(path: object, max_file_size: int) -> int:
    """The byte limit for reading a file: `max-file-size`, except for a notebook, whose
    outputs do not count (its code cells' text is checked once it is read)."""
    return MAX_NOTEBOOK_BYTES if is_notebook(path) else max_file_size


def decode_file(path: object, data: bytes, max_file_size: int) -> str:
    """The Python text of a file's bytes: a notebook's joined code cells, else the source
    decoded as Python decodes it."""
    if is_notebook(path):
        return read_notebook(data, max_file_size).code
    return decode_source(data)


def edit_in_cell(notebook: Notebook, edit: Edit) -> tuple[int, Edit]:
    """(the cell of the edit's start, the edit with rows counting in that cell)."""
    (cell, first), (_, last) = notebook.locate(edit.start.row), notebook.locate(edit.end.row)
    return cell, Edit(edit.content, Position(first, edit.start.column),
                      Position(last, edit.end.column))


class Notebooks:
    """The notebooks of a run by reported filename, read again when a report first needs
    their cells (workers and the cache keep only the joined text); stdin's bytes are kept."""

    def __init__(self) -> None:
        self.loaded: dict[str, Notebook | None] = {}
        self.given: dict[str, bytes] = {}

    def add_stdin(self, display: str, data: bytes) -> None:
        self.given[display] = data
        self.loaded.pop(display, None)

    def get(self, display: str) -> Notebook | None:
        """The notebook reported as `display`; None when it is not one or cannot be read."""
        if not is_notebook(display):
            return None
        if display not in self.loaded:
            try:
                data = self.given.get(display)
                if data is None:
                    with open(display, "rb") as stream:
                        data = stream.read(MAX_NOTEBOOK_BYTES + 1)
                self.loaded[display] = read_notebook(data)
            except (OSError, SourceError):
                self.loaded[display] = None
        return self.loaded[display]

    def read_cell(self, display: str, number: int) -> str | None:
        notebook = self.get(display)
        return notebook.cell_text(number) if notebook is not None else None

    def in_cells(self, findings: list[Finding]) -> list[Finding]:
        """The findings as reported: in a notebook, with their cell, rows counting in it."""
        return [self.in_cell(finding) for finding in findings]

    def in_cell(self, finding: Finding) -> Finding:
        notebook = self.get(finding.filename)
        site = finding.site
        if site is not None and (site_book := self.get(site.filename)) is not None:
            cell, row = site_book.locate(site.row)
            site = replace(site, row=row, cell=cell)
        if notebook is None or finding.cell is not None or (
                finding.code == "CKP999" and "line" not in finding.data):
            return replace(finding, site=site)  # (a CKP999 without a line: the whole file)
        data = finding.data
        message = finding.message
        if finding.code == "CKP999" and isinstance(data.get("line"), int):
            cell, row = notebook.locate(data["line"])
            suffix = f"(line {data['line']})"
            if message.endswith(suffix):
                message = f"{message[:-len(suffix)]}(line {row})"
            data = {**data, "line": row}
            start = end = Position(row, 1)
        else:
            message = self.places_in_cells(finding.filename, notebook, message)
            cell, row = notebook.locate(finding.start.row)
            start = Position(row, finding.start.column)
            end_cell, end_row = notebook.locate(finding.end.row)
            end = Position(end_row, finding.end.column) if end_cell == cell else start
        fix = finding.fix
        edits = [edit_in_cell(notebook, edit) for edit in fix.edits] if fix is not None else []
        if fix is not None:  # (an edit reaching into another cell: no fix there)
            fix = (replace(fix, edits=tuple(e for _, e in edits))
                   if all(number == cell for number, _ in edits) else None)
        return replace(finding, start=start, end=end, site=site, fix=fix, cell=cell,
                       message=message, data=self.data_in_cells(data))

    @staticmethod
    def places_in_cells(filename: str, notebook: Notebook, message: str) -> str:
        """A message's places in the notebook (`train.ipynb:10`, a row of the joined text) as
        `train.ipynb:cell 4:2`."""
        def placed(match: re.Match) -> str:
            cell, row = notebook.locate(int(match.group(1)))
            return f"{filename}:cell {cell}:{row}"

        return re.sub(rf"(?<![\w./\\]){re.escape(filename)}:(\d+)(?!\d)", placed, message)

    def data_in_cells(self, data: dict[str, Any]) -> dict[str, Any]:
        """`data` with the places it names in notebooks (`changes`, `hazard`, `backward`:
        objects with a filename and a row) given their cell and row in it."""
        def placed(value: Any) -> Any:
            if isinstance(value, dict) and isinstance(value.get("filename"), str) and \
                    isinstance(value.get("row"), int):
                notebook = self.get(value["filename"])
                if notebook is not None:
                    cell, row = notebook.locate(value["row"])
                    return {**value, "row": row, "cell": cell}
            return value

        return {key: ([placed(item) for item in value] if isinstance(value, list)
                      else placed(value)) for key, value in data.items()}
