"""The hand review of precision on real packages (docs/precision.md), reproducibly.

    python scripts/precision_review.py lint OUT_DIR NAME=FOLDER...   # findings, sites
    python scripts/precision_review.py sample OUT_DIR                # findings to label
    python scripts/precision_review.py sites OUT_DIR NAME=FOLDER...  # grep-found sites
    python scripts/precision_review.py summary [--check]             # the doc's table

`lint` runs ckptlint (every code, CKP901 included) on each package folder in one process and
writes `OUT_DIR/NAME.json`: `{"findings": [...], "sites": [...]}`. `sample` lists the segment
findings (CKP2xx–4xx) and the hand-written checkpoints (CKP106) to review: all of them, or,
for a code with more than `--per-code` findings, a random sample drawn with
`random.Random(seed)` from the findings sorted by (package, file, row); the labels are then
written by hand into docs/precision-labels.csv.
`sites` finds every call of a checkpoint API's name in the packages' source (tokens, so comments
and strings do not count) and says for each whether ckptlint analysed it (a site with resolved
targets), reported CKP901 with a reason, or found nothing there. `summary` counts the labels per
code; `--check` exits 1 when docs/precision.md does not show that table (the test suite runs it).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import subprocess
import sys
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "docs" / "precision-labels.csv"
DOC = ROOT / "docs" / "precision.md"
FIELDS = ("package", "file", "row", "code", "label", "reason")
VERDICTS = ("true", "debatable", "false")
SEED = 13
PER_CODE = 30
# The names a checkpointing call is made by, in the packages reviewed and in torch.
CHECKPOINT_CALLS = frozenset({
    "checkpoint", "checkpoint_sequential", "checkpoint_wrapper", "apply_activation_checkpointing",
    "_gradient_checkpointing_func", "non_reentrant_checkpoint"})
TABLE_START = "<!-- summary: scripts/precision_review.py summary -->"
TABLE_END = "<!-- end summary -->"


# Codes reviewed finding by finding: the segment rules, and CKP106 (a claim about one class).
REVIEWED_SITE_CODES = frozenset({"CKP106"})


def is_reviewed_code(code: str) -> bool:
    return code[3] in "234" or code in REVIEWED_SITE_CODES


# -- lint ------------------------------------------------------------------------------------
def lint_packages(out: Path, packages: dict[str, Path], root: Path | None = None,
                  timeout: float | None = None) -> None:
    """Lint each folder into `OUT/NAME.json`; with `timeout`, each in a child process given
    that many seconds, a folder that runs out (or fails) named in
    `OUT/not-linted.txt`."""
    out.mkdir(parents=True, exist_ok=True)
    if timeout is not None:
        for name, folder in packages.items():
            command = [sys.executable, __file__, "lint", str(out), f"{name}={folder}"]
            if root is not None:
                command[4:4] = ["--root", str(root)]
            result = out / f"{name}.json"
            result.unlink(missing_ok=True)
            try:
                code = subprocess.run(command, timeout=timeout, check=False).returncode
                problem = f"exit status {code}" if code else ""
            except subprocess.TimeoutExpired:  # unless it ran out after writing its result
                problem = "" if result.exists() else f"over {timeout:g} s"
            if problem:
                with (out / "not-linted.txt").open("a", encoding="utf-8") as handle:
                    handle.write(f"{name} {folder} ({problem})\n")
                print(name, "not linted:", problem)
        return
    sys.path.insert(0, str(ROOT))
    from ckptlint.config import load_config, with_cli
    from ckptlint.engine.run import lint

    for name, folder in packages.items():
        config = with_cli(load_config([str(folder)]), select=("CKP",), extend_select=("CKP901",))
        result = lint([str(folder)], config, jobs=1)
        (out / f"{name}.json").write_text(json.dumps({
            "root": str(root or folder),
            "findings": [finding.to_json() for finding in result.findings],
            "sites": [site.to_json() for site in result.sites]}, indent=1))
        counts = Counter(finding.code for finding in result.findings)
        print(name, dict(sorted(counts.items())), f"{len(result.sites)} sites")


def load_results(out: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(out.glob("*.json"))}


# -- sample ----------------------------------------------------------------------------------
def sample(results: dict[str, dict], seed: int, per_code: int) -> list[dict]:
    by_code: dict[str, list[dict]] = {}
    for name, result in results.items():
        for finding in result["findings"]:
            if is_reviewed_code(finding["code"]):
                by_code.setdefault(finding["code"], []).append({
                    "package": package_of(name),
                    "file": relative(finding["filename"], result["root"]),
                    "row": finding["location"]["row"], "code": finding["code"],
                    "message": finding["message"]})
    rows = []
    for code in sorted(by_code):
        findings = sorted(by_code[code], key=lambda f: (f["package"], f["file"], f["row"]))
        if len(findings) > per_code:
            findings = sorted(random.Random(seed).sample(findings, per_code),
                              key=lambda f: (f["package"], f["file"], f["row"]))
        rows.extend(findings)
    return rows


def package_of(name: str) -> str:
    """`transformers.llama` (a package linted in parts, one result per part) -> `transformers`."""
    return name.split(".", 1)[0]


def relative(filename: str, root: str) -> str:
    return Path(filename).relative_to(root).as_posix()


# -- sites -----------------------------------------------------------------------------------
def checkpoint_calls(text: str) -> list[tuple[int, str]]:
    """(row, name) of each call of a checkpoint API's name: `name(` as tokens, not after
    `def`."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                  if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    except (tokenize.TokenError, SyntaxError):
        return []
    calls = []
    for before, token, after in zip([None, *tokens], tokens, [*tokens[1:], None]):
        if (token.type == tokenize.NAME and token.string in CHECKPOINT_CALLS
                and after is not None and after.string == "("
                and not (before is not None and before.string == "def")):
            calls.append((token.start[0], token.string))
    return calls


def site_coverage(results: dict[str, dict], packages: dict[str, Path]) -> list[dict]:
    rows = []
    for name, folder in packages.items():
        result = results[name]
        analysed = {(s["site"]["filename"], s["site"]["row"]) for s in result["sites"]
                    if s["targets"]}
        unresolved = {(f["site"]["filename"], f["site"]["row"]): f["data"]["reason"]
                      for f in result["findings"] if f["code"] == "CKP901" and f["site"]}
        found = {(s["site"]["filename"], s["site"]["row"]) for s in result["sites"]}
        for path in sorted(folder.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for row, call in checkpoint_calls(text):
                key = (str(path), row)
                if f"def {call}(" in text:
                    status, reason = "own-function", "calls the file's own function of that name"
                elif key in analysed:
                    status, reason = "analysed", ""
                elif key in unresolved:
                    status, reason = "CKP901", unresolved[key]
                elif key in found:
                    status, reason = "site-only", "a site with no segment (an enabling call)"
                else:
                    status, reason = "missed", ""
                rows.append({"package": name, "file": str(path), "row": row, "call": call,
                             "status": status, "reason": reason})
    return rows


# -- summary ---------------------------------------------------------------------------------
def read_labels(path: Path = LABELS) -> list[dict]:
    """The labelled findings; ValueError naming the row when one is malformed."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ValueError(f"{path}: columns must be {', '.join(FIELDS)}")
        rows = list(reader)
    for number, row in enumerate(rows, start=2):
        problem = (not row["package"] or not row["file"] or not row["row"].isdigit()
                   or len(row["code"]) != 6 or not row["code"].startswith("CKP")
                   or not is_reviewed_code(row["code"]) or row["label"] not in VERDICTS
                   or not row["reason"].strip())
        if problem:
            raise ValueError(f"{path}:{number}: malformed row {row}")
    keys = [(r["package"], r["file"], r["row"], r["code"]) for r in rows]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: a finding is labelled twice")
    return rows


def summary_table(rows: list[dict]) -> str:
    counts: dict[str, Counter] = {}
    for row in rows:
        counts.setdefault(row["code"], Counter())[row["label"]] += 1
    counts["all"] = sum(counts.values(), Counter())
    lines = ["| code | reviewed | true | debatable | false | true % | false % |",
             "|---|---|---|---|---|---|---|"]
    for code in [*sorted(c for c in counts if c != "all"), "all"]:
        c = counts[code]
        total = sum(c.values())
        lines.append(f"| {code} | {total} | {c['true']} | {c['debatable']} | {c['false']} | "
                     f"{100 * c['true'] / total:.0f} | {100 * c['false'] / total:.0f} |")
    return "\n".join(lines)


def doc_table(text: str) -> str | None:
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        return None
    return text[start + len(TABLE_START):end].strip()


# -- command line ----------------------------------------------------------------------------
def package_arguments(values: list[str]) -> dict[str, Path]:
    return {name: Path(folder) for name, folder in (value.split("=", 1) for value in values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    lint_command = commands.add_parser("lint")
    lint_command.add_argument("out", type=Path)
    lint_command.add_argument("packages", nargs="+")
    lint_command.add_argument("--root", type=Path,
                              help="write file names relative to this folder (default: each "
                                   "package folder); for a package linted in parts")
    lint_command.add_argument("--timeout", type=float,
                              help="seconds per folder, each linted in a child process")
    sample_command = commands.add_parser("sample")
    sample_command.add_argument("out", type=Path)
    sample_command.add_argument("--seed", type=int, default=SEED)
    sample_command.add_argument("--per-code", type=int, default=PER_CODE)
    sites_command = commands.add_parser("sites")
    sites_command.add_argument("out", type=Path)
    sites_command.add_argument("packages", nargs="+")
    summary_command = commands.add_parser("summary")
    summary_command.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "lint":
        lint_packages(args.out, package_arguments(args.packages), args.root, args.timeout)
    elif args.command == "sample":
        writer = csv.DictWriter(sys.stdout, ("package", "file", "row", "code", "message"))
        writer.writeheader()
        writer.writerows(sample(load_results(args.out), args.seed, args.per_code))
    elif args.command == "sites":
        rows = site_coverage(load_results(args.out), package_arguments(args.packages))
        for row in rows:
            print(f"{row['package']} {row['file']}:{row['row']} {row['call']} {row['status']} "
                  f"{row['reason']}")
        print(dict(Counter(row["status"] for row in rows)))
    else:
        table = summary_table(read_labels())
        if not args.check:
            print(table)
        elif doc_table(DOC.read_text(encoding="utf-8")) != table:
            print(f"{DOC} does not show the summary of {LABELS}: run "
                  "`python scripts/precision_review.py summary` and paste it", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
