"""Static positions in files with lone `\\` continuation lines, which libcst leaves out."""

from __future__ import annotations

from ckptlint.syntax.source import line_map, parse_text


def _rows(text: str):
    return line_map(text, parse_text(text, "m.py"))


def test_lines_libcst_leaves_out_are_counted_wherever_they_are():
    text = "\\\nimport os\n\\\r\nx = 1\r\ndef f():\n    y = 1\n\\\n    return y\n"
    rows = _rows(text)
    # libcst's code: import os / x = 1 / def f(): / y = 1 / return y (five lines)
    assert rows[1:6] == [2, 4, 5, 6, 8]


def test_files_without_them_need_no_map():
    assert _rows("x = 1\ny = \\\n  2\n") is None
    assert _rows("s = '''\n\\\n'''\n") is None  # inside a string: libcst keeps it
