"""`ckptlint dynamic [PATH...] -- COMMAND ARGS...` (importing this module never imports torch)."""

from __future__ import annotations

import importlib.util
import json
import sys

import click

from ckptlint.dynamic.runner import end_by_signal
from ckptlint.output import FORMATS, OutputContext, render

USAGE_EXAMPLE = "ckptlint dynamic src/ -- python train.py --steps 2"


class DynamicCommand(click.Command):
    """Splits the arguments at the first `--`: before it ours, after it the command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            index = args.index("--")
            ctx.meta["ckptlint.dynamic.command"] = list(args[index + 1:])
            args = list(args[:index])
        else:
            ctx.meta["ckptlint.dynamic.command"] = []
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "-- COMMAND [ARGS]..."]


def torch_available() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require_torch(ctx: click.Context, command: str) -> None:
    """Exit 2 with a clear message when torch cannot be imported here."""
    if not torch_available():
        click.echo(f"ckptlint {command} needs torch, which is not importable here; install it "
                   "(`pip install 'ckptlint[dynamic]'`) in the environment that runs "
                   "ckptlint.", err=True)
        ctx.exit(2)


def static_analysis(paths: list[str], config_file: str | None, findings_file: str | None):
    """(findings, sites, CKP501 enabled) from the static engine or a saved JSON run."""
    from ckptlint.findings import Finding

    if findings_file:
        with open(findings_file, encoding="utf-8") as handle:
            data = json.load(handle)
        return [Finding.from_json(item) for item in data], [], True
    from ckptlint.config import load_config
    from ckptlint.engine import lint

    config = load_config(paths, config_file)
    result = lint(paths, config)
    enabled = True
    try:
        enabled = "CKP501" in config.enabled_codes()
    except Exception:
        pass
    return list(result.findings), list(result.sites), enabled


@click.command("dynamic", cls=DynamicCommand,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--format", "output_format", type=click.Choice(sorted(FORMATS)), default="text",
              show_default=True, help="Output format.")
@click.option("--replay-now", is_flag=True,
              help="Also rerun each watched segment right after its forward (restored RNG) "
                   "and compare; runs the user's function once more per call.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop the command after this many seconds.")
@click.option("--config", "config_file", type=click.Path(), help="Config file to use.")
@click.option("--findings", "findings_file", type=click.Path(exists=True, dir_okay=False),
              help="Judge the findings of a saved `ckptlint --format json` run instead of "
                   "running the static analysis.")
@click.option("--progress-every", type=click.FloatRange(min=0.1), default=10.0, hidden=True)
@click.pass_context
def dynamic(ctx: click.Context, paths: tuple[str, ...], output_format: str, replay_now: bool,
            timeout: float | None, config_file: str | None, findings_file: str | None,
            progress_every: float) -> None:
    """Run COMMAND with checkpoint calls watched; print each finding with a verdict.

    PATHS (default: the current folder) are linted first; COMMAND (a training script, `pytest
    ...`, `python -m ...`) then runs with every checkpoint's forward and replay watched.

    Verdicts: confirmed, cleared, unexercised, static-only, error. Exit status: 1 if anything
    is confirmed; else 2 if the command could not start or exited non-zero; else 0. SIGTERM or
    Ctrl-C stops the command (its whole process group), prints the verdicts so far and ends
    ckptlint by the same signal. The command's own output goes to stderr; verdicts go to
    stdout.
    """
    command = ctx.meta.get("ckptlint.dynamic.command") or []
    if not command:
        raise click.UsageError(f"give the command to run after `--`, e.g. `{USAGE_EXAMPLE}`")
    require_torch(ctx, "dynamic")
    from ckptlint.dynamic.runner import run_watched
    from ckptlint.dynamic.verdicts import build_plan, exit_status, judge_all

    try:
        findings, sites, ckp501 = static_analysis(list(paths) or ["."], config_file,
                                                  findings_file)
    except Exception as error:  # config errors and the like: exit 2 naming the problem
        name = type(error).__name__
        if name not in ("ConfigError", "OSError", "FileNotFoundError", "JSONDecodeError",
                        "KeyError", "ValueError"):
            raise
        click.echo(f"ckptlint: {error}", err=True)
        ctx.exit(2)
    plan = build_plan(findings, sites)

    def progress(line: str) -> None:
        click.echo(line, err=True)

    watched = run_watched(command, plan=plan, replay_now=replay_now, timeout=timeout,
                          progress=progress, progress_every=progress_every)
    judged = judge_all(findings, watched.observations, sites, watched.info, plan, ckp501)
    info = watched.info
    info.report_failure(timeout)
    sys.stdout.write(render(output_format, judged, OutputContext()))
    sys.stdout.flush()
    if info.signal is not None:
        end_by_signal(info.signal)
    ctx.exit(exit_status(judged, info))
