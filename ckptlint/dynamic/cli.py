"""`ckptlint dynamic [PATH...] -- COMMAND ARGS...` (importing this module never imports torch)."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Callable

import click

from ckptlint.dynamic.runner import end_by_signal
from ckptlint.output import FORMATS, OutputContext, encode_report, render

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


POSITION = {"row": int, "column": int}
# What `ckptlint --format json` writes for a finding (the keys dynamic mode reads).
FINDING_SHAPE = {"code": str, "message": str, "filename": str, "location": POSITION,
                 "end_location": POSITION, "data": {}}
OPTIONAL_SHAPE = {
    "site": {"filename": str, "row": int, "column": int},
    "target": {"filename": str, "row": int, "qualname": str},
    "chain": [str],
    "fix": {"applicability": str, "message": str,
            "edits": [{"content": str, "location": POSITION, "end_location": POSITION}]},
}


class FindingsFileError(Exception):
    """A --findings file that cannot be read as findings (one line: the file and the fault)."""


def _kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def shape_problem(value, shape, where: str) -> str | None:
    """What in `value` does not fit `shape` (a type, {key: shape} or [shape]), or None."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is {_kind(value)}, not an object"
        for key, inner in shape.items():
            if key not in value:
                return f"{where} has no \"{key}\""
            problem = shape_problem(value[key], inner, f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is {_kind(value)}, not an array"
        for index, item in enumerate(value):
            problem = shape_problem(item, shape[0], f"{where}[{index}]")
            if problem:
                return problem
        return None
    if not isinstance(value, shape) or (shape is int and isinstance(value, bool)):
        wanted = {int: "an integer", str: "a string"}[shape]
        return f"{where} is {_kind(value)}, not {wanted}"
    return None


def load_findings(path: str):
    """The findings of a saved `ckptlint --format json` run; FindingsFileError if it is not one."""
    from ckptlint.findings import Finding

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as error:
        raise FindingsFileError(f"{path}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise FindingsFileError(f"{path}: not UTF-8 text") from None
    except ValueError as error:
        raise FindingsFileError(f"{path}: not JSON ({error})") from None
    expected = "expected a JSON array of findings as `ckptlint --format json` writes it"
    if not isinstance(data, list):
        raise FindingsFileError(f"{path}: {expected}, got {_kind(data)}")
    findings = []
    for index, item in enumerate(data, 1):
        where = f"finding {index}"
        problem = shape_problem(item, FINDING_SHAPE, where)
        for key, shape in OPTIONAL_SHAPE.items():
            if problem is None and isinstance(item, dict) and item.get(key) is not None:
                problem = shape_problem(item[key], shape, f"{where}.{key}")
        if problem is None:
            try:
                findings.append(Finding.from_json(item))
            except (TypeError, ValueError, KeyError) as error:
                problem = f"{where}: {error}"
        if problem:
            raise FindingsFileError(f"{path}: {expected}; {problem}")
    return findings


def static_analysis(paths: list[str], config_file: str | None, findings_file: str | None):
    """(findings, sites, CKP501 enabled, notebooks) from the static engine or a saved JSON run.
    The findings' rows count in the file as linted (a notebook's joined cells; a saved run's
    notebook findings already name their cell); `notebooks` places them in cells for output."""
    from ckptlint.syntax.notebook import Notebooks

    if findings_file:
        return load_findings(findings_file), [], True, Notebooks()
    from ckptlint.config import load_config
    from ckptlint.engine.run import lint

    config = load_config(paths, config_file)
    result = lint(paths, config)
    return (list(result.findings), list(result.sites), "CKP501" in config.enabled_codes(),
            result.notebooks)


@click.command("dynamic", cls=DynamicCommand,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(readable=False))
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

    Verdicts: confirmed, cleared, unexercised, static-only, error. After the run a summary
    on stderr says what was watched. Exit status: 1 if anything is confirmed; else 2 if the
    command could not start or exited non-zero, the watcher never attached in any process
    (`python -I`, a replaced PYTHONPATH), or on a bad configuration or --findings file;
    else 0. SIGTERM or Ctrl-C stops the command (its whole
    process group), prints the verdicts so far and ends ckptlint by the same signal. The
    command's own output goes to stderr; verdicts go to stdout.
    """
    command = ctx.meta.get("ckptlint.dynamic.command") or []
    if not command:
        raise click.UsageError(f"give the command to run after `--`, e.g. `{USAGE_EXAMPLE}`")
    require_torch(ctx, "dynamic")
    status, signum = guarded(lambda: watch_and_judge(
        command, list(paths) or ["."], config_file, findings_file, output_format, replay_now,
        timeout, progress_every))
    if signum is not None:
        end_by_signal(signum)
    ctx.exit(status)


def guarded(work: Callable[[], tuple[int, int | None]]) -> tuple[int, int | None]:
    """Run `work`; a configuration error, an unusable --findings file or an internal error is
    one line on stderr and exit 2 (never a traceback, never the 1 that means "confirmed")."""
    from ckptlint.cli import internal_error
    from ckptlint.config import ConfigError

    try:
        return work()
    except (ConfigError, FindingsFileError) as error:
        click.echo(f"ckptlint: error: {error}", err=True)
        sys.exit(2)
    except Exception as error:  # noqa: BLE001 - never a traceback
        internal_error(error)


def watch_and_judge(command: list[str], paths: list[str], config_file: str | None,
                    findings_file: str | None, output_format: str, replay_now: bool,
                    timeout: float | None, progress_every: float) -> tuple[int, int | None]:
    """Lint (or read --findings), run the command watched, print the verdicts.
    Returns (exit status, the signal that stopped the run or None)."""
    from ckptlint.dynamic.runner import run_watched
    from ckptlint.dynamic.summary import summary_lines
    from ckptlint.dynamic.verdicts import build_plan, exit_status, judge_all

    findings, sites, ckp501, notebooks = static_analysis(paths, config_file, findings_file)
    plan = build_plan(findings, sites)

    def progress(line: str) -> None:
        click.echo(line, err=True)

    watched = run_watched(command, plan=plan, replay_now=replay_now, timeout=timeout,
                          progress=progress, progress_every=progress_every)
    judged = judge_all(findings, watched.observations, sites, watched.info, plan, ckp501)
    info = watched.info
    info.report_failure(timeout)
    for line in summary_lines(watched.observations, info):
        click.echo(line, err=True)
    sys.stdout.flush()
    shown = notebooks.in_cells(judged)     # a notebook's findings: by cell, rows in it
    context = OutputContext(read_cell=notebooks.read_cell)
    sys.stdout.buffer.write(encode_report(render(output_format, shown, context)))
    sys.stdout.buffer.flush()
    sys.stdout.flush()
    return exit_status(judged, info, watched.observations), info.signal
