"""The `ckptlint` command line (its contract: README.md, "Usage" and "Integrations")."""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import click

from ckptlint import __version__
from ckptlint.config import ConfigError, load_config, with_cli
from ckptlint.output import FORMATS

# Subcommands whose modules load only when used (`dynamic` needs torch in the child).
LAZY_COMMANDS = {
    "dynamic": "ckptlint.dynamic.cli:dynamic",
    "explain": "ckptlint.commands.explain:explain",
    "profile": "ckptlint.dynamic.profile.cli:profile",
    "rule": "ckptlint.rule_pages:rule",
}


def split_codes(values: tuple[str, ...]) -> list[str]:
    return [code.strip().upper() for value in values for code in value.split(",") if code.strip()]


class CkptlintGroup(click.Group):
    """`ckptlint PATH...` means `ckptlint check PATH...`; some subcommands load lazily."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module_name, attr = LAZY_COMMANDS[name].split(":")
            try:
                return getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as error:
                raise click.ClickException(f"`{name}` is not available: {error}") from None
        return super().get_command(ctx, name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] not in self.list_commands(ctx) and args[0] not in ("--help", "-h"):
            args = ["check", *args]
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0].startswith("-") and args[0] not in ("--help", "-h", "--version")):
            args = ["check", *args]
        return super().parse_args(ctx, args)


@click.group(cls=CkptlintGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ckptlint")
def main() -> None:
    """A linter that keeps PyTorch activation checkpointing safe.

    `ckptlint PATH...` is short for `ckptlint check PATH...`.
    """


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(readable=False))  # unreadable: CKP999
@click.option("--format", "output_format", type=click.Choice(sorted(FORMATS)), default="text",
              show_default=True, help="Output format.")
@click.option("--select", multiple=True, help="Codes or prefixes to check (replaces config).")
@click.option("--extend-select", multiple=True, help="Codes or prefixes to add.")
@click.option("--ignore", multiple=True, help="Codes or prefixes to skip.")
@click.option("--extend-exclude", multiple=True, help="Extra exclude globs.")
@click.option("--force-exclude", is_flag=True,
              help="Apply excludes to files named on the command line too (for pre-commit).")
@click.option("--config", "config_file", type=click.Path(), help="Config file to use.")
@click.option("--stdin-filename", help="Filename to report when linting stdin (`-`).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--ignore-noqa", is_flag=True, help="Report findings `# noqa` would suppress.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the cache.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: CPU count).")
# Integrations (fixes, suppression tools, reports): handled in ckptlint/commands/check.py.
@click.option("--fix", is_flag=True, help="Apply safe fixes (with --unsafe-fixes: unsafe too).")
@click.option("--unsafe-fixes", is_flag=True,
              help="Offer unsafe fixes (they change behaviour); applied with --fix.")
@click.option("--diff", is_flag=True,
              help="Print the fixes as a unified diff and write nothing (exit 1 if any).")
@click.option("--exit-non-zero-on-fix", is_flag=True,
              help="Exit 1 when --fix changed something, even if nothing is left.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every reported line.")
@click.option("--statistics", "show_statistics", is_flag=True,
              help="Print a count per code instead of the findings.")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False),
              help="Write the report to this file instead of stdout.")
@click.option("--show-settings", is_flag=True,
              help="Print the resolved settings and the library versions in force (and "
                   "where each comes from), then exit.")
def check(paths: tuple[str, ...], output_format: str, select, extend_select, ignore,
          extend_exclude, force_exclude: bool, config_file: str | None,
          stdin_filename: str | None, exit_zero: bool, ignore_noqa: bool, no_cache: bool,
          jobs: int | None, show_settings: bool, **integration) -> None:
    """Lint PATHS (files or folders; `-` reads stdin)."""
    from ckptlint.engine.run import lint

    path_list = list(paths) or ["."]
    reading_stdin = "-" in path_list
    try:
        start = [stdin_filename] if reading_stdin and stdin_filename else path_list
        config = load_config(start, config_file)
        config = with_cli(config, select=split_codes(select),
                          extend_select=split_codes(extend_select), ignore=split_codes(ignore),
                          extend_exclude=list(extend_exclude))
        if show_settings:
            from ckptlint.commands.settings import render_settings

            click.echo(render_settings(config, path_list))
            sys.exit(0)
        # Bytes, decoded as a file would be (coding line, BOM); undecodable input is CKP999.
        stdin_bytes = sys.stdin.buffer.read() if reading_stdin else None
        result = lint(path_list, config, force_exclude=force_exclude, stdin_text=stdin_bytes,
                      stdin_filename=stdin_filename, ignore_noqa=ignore_noqa, jobs=jobs,
                      use_cache=not no_cache)
        stdin_text = (result.sources.get(stdin_filename or "-", "")
                      if stdin_bytes is not None else None)
    except ConfigError as error:
        click.echo(f"ckptlint: error: {error}", err=True)
        sys.exit(2)
    except Exception as error:  # noqa: BLE001 - never a traceback
        internal_error(error)
    from ckptlint.commands.check import CheckOptions, run_check

    if integration["add_noqa"] and (integration["fix"] or integration["diff"]):
        click.echo("ckptlint: error: --add-noqa cannot be combined with --fix or --diff",
                   err=True)
        sys.exit(2)
    options = CheckOptions(path_list, config, output_format, force_exclude, stdin_text,
                           stdin_filename, ignore_noqa, exit_zero=exit_zero, **integration)
    try:
        sys.exit(run_check(result, options))
    except ConfigError as error:
        click.echo(f"ckptlint: error: {error}", err=True)
        sys.exit(2)
    except Exception as error:  # noqa: BLE001 - never a traceback
        internal_error(error)


@main.command()
def server() -> None:
    """Run the language server (LSP over stdio) for editors; needs `ckptlint[server]`."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        click.echo("ckptlint: error: `ckptlint server` needs pygls, which is not installed: "
                   "pip install 'ckptlint[server]'", err=True)
        sys.exit(2)
    from ckptlint.server.protocol import serve

    serve()


def internal_error(error: Exception) -> NoReturn:
    """One line and exit 2 instead of a traceback (CKPTLINT_DEBUG=1 shows it)."""
    if os.environ.get("CKPTLINT_DEBUG"):
        raise error
    click.echo(f"ckptlint: internal error: {error.__class__.__name__}: {error} "
               "(run with CKPTLINT_DEBUG=1 for the traceback, and please report it)", err=True)
    sys.exit(2)
