#!/usr/bin/env python3
"""Diagnostic latency of `ckptlint server` after an edit of a model file.

    python bench/server_latency.py                       # examples/transformer_block.py
    python bench/server_latency.py --edits 21 path/to/model.py

Starts the real server (LSP over stdio), opens the file, waits for its first diagnostics
(the fork server and its imports are warm from then on), then makes `--edits` edits, each
waiting for its diagnostics, alternating between the file and the file with a checkpoint
call's `use_reentrant` flipped, and prints the median, min and max time from sending the
`didChange` to receiving the diagnostics of that version. The time includes the server's
debounce pause (`DEBOUNCE_SECONDS`).

By default the file is copied alone into a temporary project (nothing else to reach).
`--in-tree` opens it where it is, in its own project, as an editor does: its segments reach
the project's other modules, and the edits stay in the server's buffer (nothing is written).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.cli_helpers import ckptlint_command  # noqa: E402
from tests.lsp_client import LspClient  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(REPO / "examples" / "transformer_block.py"))
    parser.add_argument("--edits", type=int, default=15)
    parser.add_argument("--in-tree", action="store_true",
                        help="open the file where it is, in its own project")
    options = parser.parse_args()
    text = Path(options.model).read_text(encoding="utf-8")
    edited = text + "\n\ndef added(x):\n    return x\n"
    with tempfile.TemporaryDirectory() as folder:
        if options.in_tree:
            path = Path(options.model).resolve()
            root = path.parent
        else:
            root = Path(folder)
            (root / "pyproject.toml").write_text("[tool.ckptlint]\n", encoding="utf-8")
            path = root / Path(options.model).name
            path.write_text(text, encoding="utf-8")
        client = LspClient([*ckptlint_command(), "server"], cwd=root)
        client.initialize(root)
        uri = client.open(path, text)
        first = client.diagnostics(uri)
        timings = []
        for version in range(2, options.edits + 2):
            mark = len(client.seen)
            sent = client.change(uri, edited if version % 2 == 0 else text, version)
            arrived, _ = client.wait_for(
                lambda m, v=version: m.get("method") == "textDocument/publishDiagnostics"
                and m["params"]["uri"] == uri and m["params"].get("version") == v, 120, mark)
            timings.append(arrived - sent)
        client.close()
    print(f"{Path(options.model).name}: {len(text.splitlines())} lines, "
          f"{len(first['diagnostics'])} diagnostics; {len(timings)} edits: median "
          f"{statistics.median(timings):.3f} s (min {min(timings):.3f}, max {max(timings):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
