"""`ckptlint explain [LOG]`: the checkpoint errors in a log, each with its likely cause.

Exit status: 0 when every checkpoint error found is explained by a signature (or none was
found), 1 when one is not, 2 on usage errors (a log that cannot be read). Never imports torch.
"""

from __future__ import annotations

import json
import sys

import click

from ckptlint.config import ConfigError, load_config, with_cli
from ckptlint.explain.errors import ErrorKind, TensorMeta, TensorMismatch
from ckptlint.explain.scan import FoundError, ScanResult, scan
from ckptlint.explain.signatures import SIGNATURES, Signature
from ckptlint.findings import Finding
from ckptlint.registry import RULES

# The findings of one rule code, in output order (`--sites`).
Sites = dict[str, list[Finding]]
MAX_SITES_SHOWN = 10

HELP = """Explain the checkpoint errors in LOG (a traceback or a training log; `-` or no
LOG reads stdin).

Finds every `CheckpointError` torch raised (and the other errors checkpointing causes: DDP's
"mark a variable ready only once", reentrant mode's refusals and its "None of the inputs have
requires_grad" warning), compares each differing saved tensor's shape, dtype and device field
by field, and names for each error its signature: the likely cause, the rule that finds the
cause in your code (`ckptlint rule CODE`) and what to do. `--list` prints the signatures;
`--sites PATH` lints PATH with those rules and lists the sites that could be responsible.

\b
Exit status: 0 every checkpoint error found is explained (or there is none),
             1 one is not, 2 the log cannot be read.
"""


@click.command(help=HELP)
@click.argument("log", required=False, default="-")
@click.option("--list", "show_list", is_flag=True, help="Print the known signatures and exit.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@click.option("--sites", "sites_path", type=click.Path(exists=True), default=None,
              metavar="PATH",
              help="Lint PATH (your project) with the rules the errors' signatures name, and "
                   "list the findings under each signature.")
def explain(log: str, show_list: bool, output_format: str, sites_path: str | None) -> None:
    if show_list:
        click.echo(render_signatures(output_format), nl=False)
        sys.exit(0)
    name = "<stdin>" if log == "-" else log
    try:
        if log == "-":
            result = scan(sys.stdin.buffer)
        else:
            with open(log, "rb") as stream:
                result = scan(stream)
    except OSError as error:
        click.echo(f"ckptlint: error: cannot read {name}: {error.strerror or error}", err=True)
        sys.exit(2)
    sites = None
    if sites_path is not None:
        try:
            sites = responsible_sites(sites_path, result)
        except ConfigError as error:
            click.echo(f"ckptlint: error: {error}", err=True)
            sys.exit(2)
    if output_format == "json":
        click.echo(json.dumps([error_json(found, sites) for found in result.errors], indent=2))
    else:
        click.echo(render_text(name, result, sites), nl=False)
    sys.exit(1 if result.unclassified else 0)


def responsible_sites(path: str, result: ScanResult) -> Sites:
    """The findings in `path` of every registered rule the errors' signatures name."""
    from ckptlint.engine.run import lint

    codes = sorted({code for found in result.errors for signature in found.signatures
                    for code in signature.rules if code in RULES})
    if not codes:
        return {}
    config = with_cli(load_config([path]), select=codes)
    sites: Sites = {code: [] for code in codes}
    linted = lint([path], config, use_cache=True)
    for finding in linted.notebooks.in_cells(linted.findings):   # a notebook's: by cell
        sites.setdefault(finding.code, []).append(finding)
    return sites


def site_json(finding: Finding) -> dict:
    cell = {} if finding.cell is None else {"cell": finding.cell}
    return {"filename": finding.filename, **cell, "row": finding.start.row,
            "column": finding.start.column, "code": finding.code, "message": finding.message}


def signature_sites(signature: Signature, sites: Sites) -> list[Finding] | None:
    """The findings of the signature's rules; None when none of its rules is run here."""
    looked_for = [code for code in signature.rules if code in sites]
    if not looked_for:
        return None
    return sorted((finding for code in looked_for for finding in sites[code]),
                  key=lambda finding: (finding.filename, finding.cell or 0, *finding.sort_key[1:]))


def sites_text(signature: Signature, sites: Sites | None) -> list[str]:
    if sites is None:
        return []
    found = signature_sites(signature, sites)
    if found is None:
        return ["    sites: none looked for (no rule of this ckptlint finds this cause)"]
    if not found:
        codes = " or ".join(code for code in signature.rules if code in sites)
        return [f"    sites: no {codes} finding in the linted code"]
    lines = [f"    site: {finding.place}: {finding.code} {finding.message}"
             for finding in found[:MAX_SITES_SHOWN]]
    if len(found) > MAX_SITES_SHOWN:
        lines.append(f"    ... and {len(found) - MAX_SITES_SHOWN} more sites")
    return lines


def rules_text(codes: tuple[str, ...]) -> str:
    if not codes:
        return "none (no static rule finds this cause)"
    return ", ".join(f"{code} {RULES[code].name} (`ckptlint rule {code}`)" if code in RULES
                     else code for code in codes)


def signature_json(signature: Signature) -> dict:
    return {"id": signature.id, "shows": signature.shows, "cause": signature.cause,
            "rules": list(signature.rules), "fix": signature.fix, "reference": signature.reference}


def render_signatures(output_format: str) -> str:
    if output_format == "json":
        return json.dumps([signature_json(signature) for signature in SIGNATURES],
                          indent=2) + "\n"
    blocks = [f"{signature.id}\n  shows: {signature.shows}\n  cause: {signature.cause}\n"
              f"  rules: {rules_text(signature.rules)}\n  fix:   {signature.fix}\n"
              f"  see:   {signature.reference}\n" for signature in SIGNATURES]
    return "\n".join(blocks)


def meta_text(meta: TensorMeta) -> str:
    shape = list(meta.shape) if meta.shape is not None else "?"
    return f"{shape} {meta.dtype or '?'} {meta.device or '?'}"


def tensor_text(mismatch: TensorMismatch, signature: Signature | None) -> str:
    differs = ", ".join(mismatch.differs()) or "nothing"
    named = signature.id if signature else "no known signature"
    return (f"  tensor at position {mismatch.position}: saved {meta_text(mismatch.saved)}, "
            f"recomputed {meta_text(mismatch.recomputed)} ({differs} differs: {named})")


def error_heading(found: FoundError) -> str:
    if found.kind is ErrorKind.MESSAGE:
        return found.message
    return f"CheckpointError: {found.message}"


def render_error(name: str, found: FoundError, sites: Sites | None) -> str:
    seen = f" (seen {found.occurrences} times)" if found.occurrences > 1 else ""
    lines = [f"{name}:{found.line}: {error_heading(found)}{seen}"]
    forward, replay = found.saved_counts
    if forward is not None or replay is not None:
        lines.append(f"  tensors saved: {forward} in the forward, {replay} in the replay")
    lines += [tensor_text(mismatch, signature) for mismatch, signature in found.tensors]
    if found.tensor_count > len(found.tensors):
        lines.append(f"  ... and {found.tensor_count - len(found.tensors)} more tensors")
    if found.kind is ErrorKind.METADATA_MISMATCH and not found.tensor_count:
        lines.append("  (no tensor lines followed the message: the log may be cut)")
    for signature in found.signatures:
        lines += [f"  signature: {signature.id}", f"    likely cause: {signature.cause}",
                  f"    rules: {rules_text(signature.rules)}", f"    fix: {signature.fix}",
                  f"    see: {signature.reference}", *sites_text(signature, sites)]
    if not found.signatures:
        lines.append("  unknown: no known signature matches this error "
                     "(`ckptlint explain --list` shows the known ones)")
    return "\n".join(lines) + "\n"


def render_text(name: str, result: ScanResult, sites: Sites | None) -> str:
    if not result.total:
        return f"no checkpoint error found in {name}\n"
    parts = [render_error(name, found, sites) for found in result.errors]
    distinct = len(result.errors) + result.not_kept
    summary = (f"{distinct} distinct checkpoint error{'s' if distinct != 1 else ''} "
               f"({result.total} seen): {distinct - result.unclassified} explained, "
               f"{result.unclassified} unknown")
    if result.not_kept:
        summary += f"; {result.not_kept} not listed (only the first {len(result.errors)} are)"
    return "\n".join([*parts, summary + "\n"])


def error_signature_json(signature: Signature, sites: Sites | None) -> dict:
    entry = signature_json(signature)
    if sites is not None:
        found = signature_sites(signature, sites)
        entry["sites"] = None if found is None else [site_json(finding) for finding in found]
    return entry


def error_json(found: FoundError, sites: Sites | None) -> dict:
    forward, replay = found.saved_counts
    return {
        "line": found.line,
        "occurrences": found.occurrences,
        "kind": str(found.kind),
        "message": found.message,
        "tensors": [{"position": mismatch.position, "saved": mismatch.saved.to_json(),
                     "recomputed": mismatch.recomputed.to_json(),
                     "differs": mismatch.differs(),
                     "signature": signature.id if signature else None}
                    for mismatch, signature in found.tensors],
        "tensor_count": found.tensor_count,
        "tensors_saved": ({"forward": forward, "recomputation": replay}
                          if forward is not None or replay is not None else None),
        "classified": found.classified,
        "signatures": [error_signature_json(signature, sites) for signature in found.signatures],
    }
