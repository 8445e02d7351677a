"""`ckptlint server`: the real language server, driven over stdio with LSP messages."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli_helpers import CKP102_SOURCE, ckptlint_command
from tests.lsp_client import LspClient

pytest.importorskip("pygls")

FIXED = CKP102_SOURCE.replace("checkpoint(block, x)", "checkpoint(block, x, use_reentrant=False)")
FOREIGN_RNG = '''\
import random

from torch.utils.checkpoint import checkpoint


def block(x):
    return x * random.random()


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
'''


@pytest.fixture
def client(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n", encoding="utf-8")
    lsp = LspClient([*ckptlint_command(), "server"], cwd=tmp_path)
    lsp.initialize(tmp_path)
    yield lsp
    assert lsp.close() == 0


def test_diagnostics_come_from_the_buffer_on_open_and_change(client, tmp_path):
    path = tmp_path / "model.py"
    path.write_text(FIXED, encoding="utf-8")  # the saved file is clean; the buffer is not
    uri = client.open(path, CKP102_SOURCE)
    (diagnostic,) = client.diagnostics(uri)["diagnostics"]
    assert diagnostic["code"] == "CKP102"
    assert diagnostic["severity"] == 2
    assert diagnostic["source"] == "ckptlint"
    assert diagnostic["range"]["start"] == {"line": 8, "character": 11}
    assert "codeDescription" not in diagnostic  # no [project.urls] rule page address
    assert "relatedInformation" not in diagnostic  # reported at its own site
    mark = len(client.seen)
    client.change(uri, FIXED, 2)
    params = client.diagnostics(uri, since=mark)
    assert (params["diagnostics"], params["version"]) == ([], 2)


def test_related_information_points_at_the_site(client, tmp_path):
    uri = client.open(tmp_path / "model.py", FOREIGN_RNG)
    (diagnostic,) = client.diagnostics(uri)["diagnostics"]
    assert diagnostic["code"] == "CKP303"
    assert diagnostic["range"]["start"]["line"] == 6
    (related,) = diagnostic["relatedInformation"]
    assert related["location"]["uri"] == uri
    assert related["location"]["range"]["start"] == {"line": 10, "character": 11}
    assert related["message"] == "checkpointed here via model.block"


def test_code_actions_fix_labelled_unsafe_and_noqa(client, tmp_path):
    uri = client.open(tmp_path / "model.py", CKP102_SOURCE)
    (diagnostic,) = client.diagnostics(uri)["diagnostics"]
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": diagnostic["range"],
        "context": {"diagnostics": [diagnostic]}})
    titles = [action["title"] for action in actions]
    assert len(actions) == 2, titles
    fix, noqa = actions
    assert "unsafe" in fix["title"] and fix["kind"] == "quickfix"
    (edit,) = fix["edit"]["changes"][uri]
    assert edit == {"range": {"start": {"line": 8, "character": 30},
                              "end": {"line": 8, "character": 30}},
                    "newText": ", use_reentrant=False"}
    (line_edit,) = noqa["edit"]["changes"][uri]
    assert line_edit["newText"] == "    return checkpoint(block, x)  # noqa: CKP102"
    assert line_edit["range"]["start"] == {"line": 8, "character": 0}


def test_unparsable_buffer_is_one_diagnostic_and_the_server_goes_on(client, tmp_path):
    broken = client.open(tmp_path / "broken.py",
                         "from torch.utils.checkpoint import checkpoint\ndef f(:\n")
    (diagnostic,) = client.diagnostics(broken)["diagnostics"]
    assert diagnostic["code"] == "CKP999" and diagnostic["severity"] == 1
    assert "syntax error" in diagnostic["message"]
    uri = client.open(tmp_path / "model.py", CKP102_SOURCE)
    assert [d["code"] for d in client.diagnostics(uri)["diagnostics"]] == ["CKP102"]


def test_failed_analysis_is_one_diagnostic_and_the_server_lives(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\nselect = 5\n", encoding="utf-8")
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "pyproject.toml").write_text("[tool.ckptlint]\n", encoding="utf-8")
    client = LspClient([*ckptlint_command(), "server"], cwd=tmp_path)
    client.initialize(tmp_path)
    uri = client.open(tmp_path / "model.py", CKP102_SOURCE)
    (diagnostic,) = client.diagnostics(uri)["diagnostics"]
    assert diagnostic["code"] == "CKP999"
    assert "ConfigError" in diagnostic["message"] and "key `select`" in diagnostic["message"]
    good = client.open(tmp_path / "good" / "model.py", CKP102_SOURCE)
    assert [d["code"] for d in client.diagnostics(good)["diagnostics"]] == ["CKP102"]
    assert client.close() == 0


def big_model(blocks: int) -> str:
    """A model file whose analysis takes a while: many checkpointed blocks."""
    parts = ["import torch\nfrom torch.utils.checkpoint import checkpoint\n\nSCALE = 1.0\n"]
    for n in range(blocks):
        parts.append(f"\n\ndef block{n}(x):\n    if x.sum() > SCALE:\n        x = x * SCALE\n"
                     f"    return torch.relu(x) + {n}\n\n\ndef forward{n}(x):\n"
                     f"    global SCALE\n    SCALE += 1\n    return checkpoint(block{n}, x)\n")
    return "".join(parts)


def test_a_newer_edit_cancels_the_running_analysis(client, tmp_path):
    uri = client.open(tmp_path / "model.py", big_model(100))
    client.wait_for(lambda m: m.get("method") == "window/logMessage"
                    and m["params"]["message"] == f"analysing {uri} (version 1)")
    client.change(uri, CKP102_SOURCE, 2)  # while version 1 is being analysed
    params = client.diagnostics(uri)
    assert params["version"] == 2
    assert [d["code"] for d in params["diagnostics"]] == ["CKP102"]
    client.request("textDocument/codeAction", {  # a round trip: anything left would be here
        "textDocument": {"uri": uri}, "range": params["diagnostics"][0]["range"],
        "context": {"diagnostics": []}})
    assert [p["version"] for p in client.published(uri)] == [2]


def test_edits_in_quick_succession_are_analysed_once(client, tmp_path):
    uri = client.open(tmp_path / "model.py", FIXED)
    client.diagnostics(uri)
    mark = len(client.seen)
    for version in range(2, 7):
        client.change(uri, CKP102_SOURCE if version % 2 else FIXED, version)
    params = client.diagnostics(uri, since=mark)
    assert params["version"] == 6
    client.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {
        "start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []}})
    assert [p["version"] for p in client.published(uri)] == [1, 6]


def test_notebook_document_sync(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n", encoding="utf-8")
    client = LspClient([*ckptlint_command(), "server"], cwd=tmp_path)
    result = client.initialize(tmp_path, notebooks=True)
    assert "notebookDocumentSync" in result["capabilities"]
    notebook = (tmp_path / "train.ipynb").as_uri()
    cells = ["%matplotlib inline\nfrom torch.utils.checkpoint import checkpoint\n",
             "# Model", "def block(x):\n    return x\n\n\ndef forward(x):\n"
             "    return checkpoint(block, x)\n"]
    uris = [f"vscode-notebook-cell:{tmp_path / 'train.ipynb'}#cell{n}" for n in range(3)]
    client.notify("notebookDocument/didOpen", {
        "notebookDocument": {"uri": notebook, "notebookType": "jupyter-notebook", "version": 1,
                             "cells": [{"kind": 1 if n == 1 else 2, "document": uris[n]}
                                       for n in range(3)]},
        "cellTextDocuments": [{"uri": uris[n], "languageId": "markdown" if n == 1 else "python",
                               "version": 1, "text": cells[n]} for n in range(3)]})
    (diagnostic,) = client.diagnostics(uris[2])["diagnostics"]
    assert diagnostic["code"] == "CKP102"
    assert diagnostic["range"]["start"] == {"line": 5, "character": 11}
    assert client.diagnostics(uris[0])["diagnostics"] == []
    fix, _ = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uris[2]}, "range": diagnostic["range"],
        "context": {"diagnostics": [diagnostic]}})
    (edit,) = fix["edit"]["changes"][uris[2]]
    assert edit["range"]["start"] == {"line": 5, "character": 30}
    assert client.close() == 0


def test_without_pygls_the_command_says_how_to_install_it(tmp_path):
    hide = ("import sys; sys.modules['pygls'] = None; from ckptlint.cli import main; "
            "main(['server'])")
    result = subprocess.run([sys.executable, "-c", hide], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == ("ckptlint: error: `ckptlint server` needs pygls, which is not "
                             "installed: pip install 'ckptlint[server]'\n")


def test_saving_a_file_rechecks_the_files_that_call_into_it(client, tmp_path):
    helpers = tmp_path / "helpers.py"
    helpers.write_text("def block(x):\n    return x * 2\n", encoding="utf-8")
    model = ("from torch.utils.checkpoint import checkpoint\n\nfrom helpers import block\n\n\n"
             "def forward(x):\n    return checkpoint(block, x, use_reentrant=False)\n")
    uri = client.open(tmp_path / "model.py", model)
    assert client.diagnostics(uri)["diagnostics"] == []
    changed = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
    helpers_uri = client.open(helpers, changed)
    helpers.write_text(changed, encoding="utf-8")
    mark = len(client.seen)
    client.notify("textDocument/didSave", {"textDocument": {"uri": helpers_uri}})
    (diagnostic,) = client.diagnostics(uri, since=mark)["diagnostics"]
    assert diagnostic["code"] == "CKP303"  # the hazard in helpers.py, at the call reaching it
    assert diagnostic["range"]["start"]["line"] == 6
    assert "helpers.py:5" in diagnostic["message"]


def test_analyses_share_the_command_lines_summary_store(tmp_path):
    """Facts about the project's files are kept in the cache folder's summary store, where the
    next analysis (and the command line) reads them instead of recomputing them."""
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n", encoding="utf-8")
    (tmp_path / "blocks.py").write_text("SCALE = 1.0\n\n\ndef block(x):\n    return x * SCALE\n",
                                        encoding="utf-8")
    (tmp_path / "train.py").write_text(
        "import blocks\n\n\ndef step(model, x):\n    loss = model(x)\n    blocks.SCALE = 2.0\n"
        "    loss.backward()\n", encoding="utf-8")
    source = ("from torch.utils.checkpoint import checkpoint\n\nfrom blocks import block\n\n\n"
              "def forward(x):\n    return checkpoint(block, x, use_reentrant=False)\n")
    lsp = LspClient([*ckptlint_command(), "server"], cwd=tmp_path,
                    env={**os.environ, "CKPTLINT_CACHE_DIR": str(tmp_path / "cache")})
    try:
        lsp.initialize(tmp_path)
        uri = lsp.open(tmp_path / "model.py", source)
        (diagnostic,) = lsp.diagnostics(uri)["diagnostics"]
        assert diagnostic["code"] == "CKP201"  # the hazard in blocks.py, at this call
        stored = list((tmp_path / "cache").glob("summaries-*/*.json"))
        assert stored, sorted(tmp_path.rglob("*"))
    finally:
        assert lsp.close() == 0
