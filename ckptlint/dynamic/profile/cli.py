"""`ckptlint profile [PATH...] -- COMMAND ARGS...` (importing this module never imports torch).

Runs COMMAND with every checkpoint call watched by the profile observer (the dynamic mode's
interception, without its op-by-op recorder) and prints, per checkpoint site, the activation
memory it frees, what its forward and recompute cost, optionally how its gradients compare
with a plain run, and a keep/drop/fix call; first of all, whether checkpointing ran at all.
Exit status: 1 when a site is called fix; else 2 on usage errors or when the command could
not start, failed or timed out; else 0 (what was measured is printed in every case).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

import click

from ckptlint.dynamic.cli import DynamicCommand, guarded, require_torch
from ckptlint.dynamic.runner import end_by_signal

USAGE_EXAMPLE = "ckptlint profile src/ -- python train.py --steps 3"
OBSERVER = "ckptlint.dynamic.profile.observer:observer"
GRAD_CHECK_NOTE = ("--grad-check ran each checked segment twice more before its real forward "
                   "(plain and checkpointed, under torch.random.fork_rng with every RNG set to "
                   "the state of the real call; module buffers and module attributes restored "
                   "afterwards) and took their gradients when the real replay ran: other "
                   "Python side effects in those segments (globals, closures, logging, I/O) "
                   "ran again.")


class ByteSize(click.ParamType):
    """A number of bytes: `1048576`, `512KiB`, `1.5 MiB`, `2GiB` (binary units; KB/MB/GB
    are read as the same binary units, K/M/G too)."""

    name = "BYTES"
    UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
             "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip()
        number = text.rstrip("bBkKmMgGiI ")
        unit = text[len(number):].strip().lower()
        try:
            amount = float(number)
        except ValueError:
            amount = -1.0
        if unit not in self.UNITS or amount <= 0:
            self.fail(f"{value!r} is not a size in bytes (e.g. 1048576, 512KiB, 1.5MiB, 2GiB)",
                      param, ctx)
        return int(amount * self.UNITS[unit])


def static_sites(paths: list[str], config):
    """Checkpoint sites of the static pass, used only to key runtime calls by site."""
    from ckptlint.config import ConfigError
    from ckptlint.engine.run import lint
    try:
        return list(lint(paths, config).sites)
    except ConfigError:
        raise
    except Exception as error:  # keying falls back to runtime positions
        click.echo(f"ckptlint profile: static pass failed ({error}); sites are keyed by "
                   "their runtime positions", err=True)
        return []


@click.command("profile", cls=DynamicCommand,
               context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(readable=False))
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False),
              help="Also write a bar chart (memory freed and recompute time per site) to this "
                   "PNG file; needs matplotlib.")
@click.option("--grad-check", is_flag=True,
              help="Compare each site's input and parameter gradients, checkpointed vs plain, "
                   "under the same RNG state (runs the segment twice more on its first calls; "
                   "its Python side effects happen again).")
@click.option("--measure-peak", is_flag=True,
              help="On CUDA, measure the peak memory of one forward of each segment with and "
                   "without the checkpoint (torch.cuda.max_memory_allocated).")
@click.option("--memory-budget", type=ByteSize(), default=None,
              help="Suggest, per checkpointed segment, a selective-checkpoint policy that "
                   "keeps at most this many bytes per call (e.g. 512KiB, 1.5MiB, 2GiB; no "
                   "suffix: bytes). Records per-operator costs of one forward per segment.")
@click.option("--verify", is_flag=True,
              help="With --memory-budget: run the command again with the suggested policies "
                   "and print the bytes they kept and whether gradients agree.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop the command after this many seconds.")
@click.option("--config", "config_file", type=click.Path(), help="Config file to use.")
@click.pass_context
def profile(ctx: click.Context, paths: tuple[str, ...], output_format: str,
            plot_file: str | None, grad_check: bool, measure_peak: bool,
            memory_budget: int | None, verify: bool,
            timeout: float | None, config_file: str | None) -> None:
    """Run COMMAND and measure what each checkpoint buys and costs.

    Usage: ckptlint profile [PATH...] [options] -- COMMAND ARGS...

    Per checkpoint site: activation bytes freed per call, forward and recompute seconds per
    call, optional gradient agreement (--grad-check) and CUDA peak memory saved
    (--measure-peak), and a recommendation: keep; drop (CKP502) when it frees less than
    `profile-min-bytes-freed` (default 1 MiB); fix (CKP501) when its replay diverged or its
    gradients differ. The command's own output goes to stderr; the table goes to stdout.
    Exit status: 1 when a site is called fix, else 2 when the command failed, else 0.
    """
    from ckptlint.dynamic.profile.table import matplotlib_available, plot_install_message

    command = ctx.meta.get("ckptlint.dynamic.command") or []
    if not command:
        raise click.UsageError(f"give the command to run after `--`, e.g. `{USAGE_EXAMPLE}`")
    for path in paths:
        if not os.path.exists(path):
            raise click.UsageError(f"{path}: no such file or directory")
    if verify and memory_budget is None:
        raise click.UsageError("--verify checks the policies that --memory-budget suggests: "
                               "give --memory-budget too")
    if plot_file and not matplotlib_available():
        click.echo(f"ckptlint: {plot_install_message()}", err=True)
        ctx.exit(2)
    require_torch(ctx, "profile")
    status, signum = guarded(lambda: profile_and_report(
        command, list(paths) or ["."], config_file, output_format, plot_file, grad_check,
        measure_peak, timeout, memory_budget, verify))
    if signum is not None:
        end_by_signal(signum)
    ctx.exit(status)


def profile_and_report(command: list[str], paths: list[str], config_file: str | None,
                       output_format: str, plot_file: str | None, grad_check: bool,
                       measure_peak: bool, timeout: float | None,
                       memory_budget: int | None = None,
                       verify: bool = False) -> tuple[int, int | None]:
    """Run the command profiled and print the report. Returns (exit status, the signal that
    stopped the run or None)."""
    from ckptlint.config import load_config
    from ckptlint.dynamic.profile.advice import (checkpointing_off, left_outside,
                                                 parent_lines, parent_suggestions,
                                                 policy_lines, suggest_policy)
    from ckptlint.dynamic.profile.report import SiteKeys

    config = load_config(paths, config_file)
    sites = static_sites(paths, config)
    keys = SiteKeys(sites)
    report, watched = _run(command, keys, timeout, {
        "grad_check": grad_check, "measure_peak": measure_peak, "memory_budget": memory_budget})
    if memory_budget is not None:
        for site in report.sites:
            site.suggestion = suggest_policy(site, memory_budget)
    verify_failure = None
    if verify and watched.info.signal is None:
        verify_failure = _verify(command, keys, timeout, report, config.profile_min_bytes_freed)
    records = report.records(config.profile_min_bytes_freed)
    notes = _notes(report, records, grad_check, measure_peak)
    alarm = checkpointing_off(report, len(sites))
    advice = (left_outside(report) + parent_lines(parent_suggestions(report))
              + policy_lines(records))
    info = watched.info
    info.report_failure(timeout)
    if output_format == "json":
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
        for note in ([alarm] if alarm else []) + advice + notes:
            click.echo(f"ckptlint profile: {note}", err=True)
    else:
        from ckptlint.dynamic.profile.table import render_text
        sys.stdout.write(render_text(records, notes=notes, command_seconds=watched.seconds,
                                     alarm=alarm, advice=advice))
    sys.stdout.flush()
    status = 2 if info.failed or verify_failure else 0
    if any(r["recommendation"] == "fix" for r in records):
        status = 1
    if plot_file and records:
        from ckptlint.dynamic.profile.table import write_plot
        try:
            write_plot(records, plot_file)
            click.echo(f"ckptlint: wrote the chart to {plot_file}", err=True)
        except Exception as error:
            click.echo(f"ckptlint: could not write {plot_file}: {error}", err=True)
            status = 2
    return status, info.signal


def _run(command: list[str], keys, timeout: float | None, options: dict):
    """One profiled run of the command: (report, what run_watched returned)."""
    from ckptlint.dynamic.profile.report import build_report, load_events
    from ckptlint.dynamic.runner import EventCounter, run_watched

    workdir = tempfile.mkdtemp(prefix="ckptlint-profile-")
    try:
        events_path = os.path.join(workdir, "profile.jsonl")
        env = dict(os.environ)
        env.update({"CKPTLINT_PROFILE_OUT": events_path,
                    "CKPTLINT_PROFILE_OPTIONS": json.dumps(options)})
        started = time.monotonic()
        counter = EventCounter(events_path)

        def progress(_line: str) -> None:   # the runner counts the recorder's file, not ours
            calls, sites = counter.update()
            click.echo(f"ckptlint profile: {time.monotonic() - started:.0f} s, {sites} "
                       f"checkpoint sites seen, {calls} calls profiled", err=True)

        watched = run_watched(command, timeout=timeout, progress=progress, env=env,
                              observers=[OBSERVER], record=False)
        return build_report(load_events(events_path), keys), watched
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _verify(command: list[str], keys, timeout: float | None, report,
            min_bytes: int) -> str | None:
    """--verify: run the command again with each suggested policy applied to its segments
    (and --grad-check on), and put what that run measured next to each prediction. Returns
    how the verifying run failed or why none could run (a torch without selective
    checkpointing), or None."""
    from ckptlint.dynamic.profile.advice import verification

    policies = {s.target: s.suggestion["save"] for s in report.sites
                if s.suggestion and s.target}
    if not policies:
        return None
    import torch.utils.checkpoint as cp
    if not hasattr(cp, "create_selective_checkpoint_contexts"):    # torch 2.4
        missing = ("this torch has no selective activation checkpointing "
                   "(torch.utils.checkpoint.create_selective_checkpoint_contexts) to apply "
                   "the policies with")
        click.echo(f"ckptlint profile: --verify: not verified: {missing}", err=True)
        for site in report.sites:
            if site.suggestion:
                site.suggestion["verified"] = verification(site.to_json(min_bytes), None,
                                                           unverifiable=missing)
        return missing
    click.echo("ckptlint profile: --verify: running the command again with the suggested "
               "policies", err=True)
    second, watched = _run(command, keys, timeout, {"grad_check": True, "policies": policies})
    failure = watched.info.describe() if watched.info.failed else None
    if failure:
        click.echo(f"ckptlint profile: --verify: the verifying run failed: {failure}"
                   + (f"; last lines of its stderr:\n{watched.info.stderr_tail}"
                      if watched.info.stderr_tail else ""), err=True)
    measured = {(s.site, s.root, s.module): s.to_json(min_bytes) for s in second.sites}
    for site in report.sites:
        if site.suggestion:
            row = site.to_json(min_bytes)
            site.suggestion["verified"] = verification(
                row, measured.get((site.site, site.root, site.module)), failure)
    return failure


def _notes(report, records, grad_check: bool, measure_peak: bool) -> list[str]:
    notes = []
    if grad_check:
        if report.grad_checked:
            notes.append(GRAD_CHECK_NOTE)
            if report.buffers_restored:
                notes.append(f"--grad-check put back {report.buffers_restored} module buffers "
                             "or attributes that its extra runs had changed.")
        else:
            notes.append("--grad-check checked nothing: no checkpoint call ran with gradients.")
    if measure_peak:
        if not any(r["peak_bytes_saved"] is not None for r in records):
            errors = [s.peak_error for s in report.sites if s.peak_error]
            notes.append("--measure-peak measured nothing: it needs the segments to run on "
                         "CUDA" + (f" ({errors[0]})" if errors else "") + "; peak_bytes_saved "
                         "is null.")
        else:
            notes.append("--measure-peak: peak saved = torch.cuda.max_memory_allocated during "
                         "one forward of the segment, plain minus checkpointed (the device's "
                         "peak statistics were reset for it).")
    for mode, reason in sorted(report.errors.items()):
        notes.append(f"{mode} calls were not watched: {reason}")
    for site, reason in report.not_watched[:5]:
        where = f"{site[0]}:{site[1]}" if site else "somewhere"
        notes.append(f"not profiled at {where}: {reason}")
    if report.not_watched[5:]:
        notes.append(f"... and {len(report.not_watched) - 5} more calls not profiled")
    if not report.started and not records:
        notes.append("the command never imported torch, so no checkpoint could run.")
    return notes
