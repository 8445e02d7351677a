"""`max-analysis-nodes`: a file too large to analyse is one CKP999 naming the limit, found
before any parser runs, and the run goes on.

The shape that motivated it: one huge list literal next to a checkpoint call. A 4.5 MB file of
that shape took 64 s and 5.9 GB in libcst; CPython's own parser alone peaks above 400 MB on it.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from ckptlint.config import Config
from ckptlint.syntax.reading import SourceError, check_nodes, count_tokens
from tests.cli_helpers import CKP102_SOURCE, ckptlint_command, run_cli, write_project

REPO = Path(__file__).resolve().parents[1]


def list_module(size: int, head: str = CKP102_SOURCE) -> str:
    """`head` (a checkpoint call), then one list literal of integers: `size` characters or
    more."""
    head += "\n\nDATA = [\n"
    rows = [head]
    length = len(head)
    number = 0
    while length < size:
        row = f"    {number * 7919 % 1000003}, {number * 104729 % 1000003},\n"
        rows.append(row)
        length += len(row)
        number += 1
    rows.append("]\n")
    return "".join(rows)


def python_tokens(text: str) -> int:
    """The reference count: `tokenize`'s tokens, line structure left out."""
    structure = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                 tokenize.ENDMARKER}
    return sum(1 for token in tokenize.generate_tokens(io.StringIO(text).readline)
               if token.type not in structure)


def json_findings(result) -> list[dict]:
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def test_a_file_over_the_limit_is_one_ckp999_and_the_rest_is_linted(tmp_path):
    big = list_module(20_000)
    root = write_project(tmp_path, {"big.py": big, "small.py": CKP102_SOURCE},
                         "max-analysis-nodes = 2000\n")
    result = run_cli(".", "--format", "json", "--no-cache", cwd=root)
    assert result.returncode == 1
    found = [(item["filename"], item["code"]) for item in json_findings(result)]
    assert found == [("big.py", "CKP999"), ("small.py", "CKP102")]
    message = json_findings(result)[0]["message"]
    assert f"({count_tokens(big)} > 2000 syntax nodes)" in message
    assert "max-analysis-nodes" in message


def test_the_limit_is_exact(tmp_path):
    text = list_module(3000)
    count = python_tokens(text)
    assert count_tokens(text) == count
    for limit, codes in ((count, ["CKP102"]), (count - 1, ["CKP999"])):
        root = write_project(tmp_path / str(limit), {"m.py": text},
                             f"max-analysis-nodes = {limit}\n")
        result = run_cli("m.py", "--format", "json", "--no-cache", cwd=root)
        assert [item["code"] for item in json_findings(result)] == codes


def test_the_count_follows_python_tokens_closely():
    """Strings and comments count once whatever they hold; within 5 % of `tokenize` on
    ckptlint's own sources and fixtures."""
    files = [*REPO.glob("ckptlint/**/*.py"), *REPO.glob("tests/fixtures/*.py")]
    assert len(files) > 50
    for path in files:
        text = path.read_text(encoding="utf-8")
        expected = python_tokens(text)
        assert abs(count_tokens(text) - expected) <= max(5, expected * 0.05), path


def test_zero_means_no_limit():
    text = "x = 1\n" * 1000
    check_nodes(text, 0)
    check_nodes(text, 3000)
    with pytest.raises(SourceError, match=r"\(3000 > 2999 syntax nodes\)"):
        check_nodes(text, 2999)


def test_a_module_over_the_limit_is_not_parsed_to_resolve_a_call(tmp_path):
    """The limit holds for modules read to follow a call too: the callee then stays unknown
    (no finding), as any unresolved callee does."""
    helper = "import random\n\n\ndef noisy(x):\n    return x * random.random()\n\n\n"
    data = list_module(20_000, head=helper)
    user = ("from torch.utils.checkpoint import checkpoint\n\nfrom pkg.data import noisy\n\n\n"
            "def forward(x):\n    return checkpoint(noisy, x, use_reentrant=False)\n")
    files = {"pkg/__init__.py": "", "pkg/data.py": data, "pkg/user.py": user}
    for limit, codes in ((0, ["CKP303"]), (2000, [])):
        root = write_project(tmp_path / str(limit), files, f"max-analysis-nodes = {limit}\n")
        result = run_cli("pkg/user.py", "--format", "json", "--no-cache", cwd=root)
        assert [item["code"] for item in json_findings(result)] == codes, limit


@pytest.mark.parametrize("value", ["-1", '"many"', "1.5", "true"])
def test_a_bad_value_exits_2_naming_the_key(tmp_path, value):
    root = write_project(tmp_path, {"m.py": CKP102_SOURCE}, f"max-analysis-nodes = {value}\n")
    result = run_cli("m.py", cwd=root)
    assert result.returncode == 2
    assert "pyproject.toml: key `max-analysis-nodes`: expected a non-negative integer" in (
        result.stderr)


def test_the_default_stops_a_4_5_mb_list_module_within_500_mb(tmp_path):
    """The default limit, on the file that motivated it, with the run's workers: the peak
    resident memory of every process of the run stays under 500 MB."""
    root = write_project(tmp_path, {"big.py": list_module(4_500_000),
                                    "small.py": CKP102_SOURCE}, "")
    measure = (
        "import json, resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps([done.returncode, done.stdout, done.stderr, peak]))\n")
    completed = subprocess.run(
        [sys.executable, "-c", measure, *ckptlint_command(), ".", "--format", "json",
         "--no-cache", "--jobs", "2"], cwd=root, capture_output=True, text=True, timeout=300)
    status, out, err, peak_kib = json.loads(completed.stdout)
    assert status == 1, err
    items = json.loads(out)
    assert [(item["filename"], item["code"]) for item in items] == [
        ("big.py", "CKP999"), ("small.py", "CKP102")]
    assert f"> {Config().max_analysis_nodes} syntax nodes" in items[0]["message"]
    assert peak_kib < 500 * 1024, peak_kib
