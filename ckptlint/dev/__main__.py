"""`python -m ckptlint.dev`: contributor tools (see `ckptlint.dev`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from ckptlint.dev import DevError, checkout
from ckptlint.registry import RULES, Dynamic


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Contributor tools for a source checkout of ckptlint."""


@main.command("rule-table")
@click.option("--check", is_flag=True,
              help="Change nothing; exit 1 when README.md's table is not the registry's.")
def rule_table(check: bool) -> None:
    """Write the README's rule table from ckptlint/registry.py."""
    from ckptlint.dev.rule_table import update

    try:
        current = update(checked_out(), RULES, check=check)
    except DevError as error:
        fail(error)
    if check and not current:
        click.echo("README.md: the rule table does not match ckptlint/registry.py; run "
                   "`python -m ckptlint.dev rule-table`", err=True)
        sys.exit(1)
    if not current:
        click.echo("README.md: rule table updated")


@main.command("new-rule")
@click.argument("code")
@click.argument("name")
@click.option("--severity", type=click.Choice(["error", "warning", "info"]), default="warning",
              show_default=True)
@click.option("--kind", type=click.Choice(["site", "segment"]), default="segment",
              show_default=True,
              help="site: about the checkpoint call (CKP1xx); segment: about the code it runs.")
@click.option("--dynamic", type=click.Choice([way.value for way in Dynamic]), default=None,
              help="How `ckptlint dynamic` judges it (default: static-only for site rules, "
                   "replay-compare for segment rules).")
@click.option("--summary", default=None,
              help="What it flags, in one line (README table, `ckptlint rule --all`).")
def new_rule(code: str, name: str, severity: str, kind: str, dynamic: str | None,
             summary: str | None) -> None:
    """Add a rule: its module, page, fixture and registry entry.

    CODE is CKPnnn, NAME lower-case words joined by dashes. The README table is regenerated;
    docs/architecture.md ("Adding a rule") says what to fill in next."""
    from ckptlint.dev.scaffold import DEFAULT_DYNAMIC, PLACEHOLDER, NewRule
    from ckptlint.dev.scaffold import new_rule as scaffold

    root = checked_out()
    rule = NewRule(code.upper(), name, severity, kind,
                   Dynamic(dynamic) if dynamic else DEFAULT_DYNAMIC[kind],
                   summary or f"({PLACEHOLDER}: what it flags, in one line)")
    try:
        written = scaffold(root, rule)
    except DevError as error:
        fail(error)
    for path in written:
        click.echo(f"wrote {path.relative_to(root)}")
    click.echo(f"next: replace every `{PLACEHOLDER}` (docs/architecture.md, \"Adding a rule\")")


def checked_out() -> Path:
    try:
        return checkout()
    except DevError as error:
        fail(error)


def fail(error: DevError) -> NoReturn:
    click.echo(f"ckptlint.dev: error: {error}", err=True)
    sys.exit(2)


if __name__ == "__main__":
    main(prog_name="python -m ckptlint.dev")
