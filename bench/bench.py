#!/usr/bin/env python3
"""Benchmark: ckptlint against ruff (and TorchFix TOR003 when installed) on the torch source.

    python bench/bench.py                    # 5 alternating runs, prints a Markdown report
    python bench/bench.py --runs 7 --write docs/performance.md

What it measures, each as the median of N runs taken in alternation (tool A, tool B, A, B...
so that a noisy machine hurts both alike):

- cold: `ckptlint check --no-cache TREE` vs `ruff check --no-cache --isolated --exit-zero TREE`
  (ruff's default rules) and, when TorchFix is installed in its own virtual environment
  (`--torchfix PATH`, `$TORCHFIX`, or `bench/.torchfix-venv/bin/torchfix`), `torchfix --select
  TOR003 TREE` (one run by default: it processes about two files a second);
- warm: `ckptlint check TREE` again with a primed cache;
- one clean file (no checkpoint call) and one file with a checkpoint call, whole process, and
  `ckptlint --version`;
- with `--site-dense TREE`: that tree cold (against ruff) and warm, and each `--edit` file
  re-linted alone after a one-line edit with the cache primed, each edit run of a file that
  holds a checkpoint site followed by the floor of a fresh process for that file (the
  interpreter's start, the imports of the command line and libcst, and libcst's parse of the
  file: what no cache can spare it).

For each: wall time, CPU time (user + system, workers included) and peak RSS of the largest
process (from `wait4`). On a loaded machine wall time stretches while CPU time does not;
both are reported, with the load average before and after. With `--site-dense`, the peak
memory of the whole process tree is sampled from /proc in one more run of each measure,
apart from the timed runs (the sampling takes CPU the measured processes need).

TREE defaults to the installed torch package (`import torch` is used only to find it).
ckptlint's own modules are byte-compiled first, as `pip install` leaves them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# diffusers: a model file with checkpoint sites, and a module most model files import.
TIMEOUT = [600.0]  # `--timeout`, for every measure
DEFAULT_EDITS = ("models/transformers/transformer_flux.py", "models/attention.py")
CLEAN_FILE = "import torch\n\n\ndef forward(x):\n    return torch.relu(x) * 2\n"
SITE_FILE = ("import torch\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
             "def block(x):\n    return torch.relu(x) * 2\n\n\n"
             "def forward(x):\n    return checkpoint(block, x)\n")


@dataclass
class Sample:
    wall: float
    cpu: float
    rss_kb: int  # the largest single process (from `wait4`)
    returncode: int
    tree_rss_kb: int = 0  # the process and all its descendants together, sampled
    # The same, each shared page counted once (proportional set size; 0 where /proc lacks it)
    tree_pss_kb: int = 0


@dataclass
class Measure:
    label: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ok_codes: tuple[int, ...] = (0, 1)
    samples: list[Sample] = field(default_factory=list)
    # Runs that sampled the process tree's memory, kept apart from the timed ones: reading
    # /proc every 20 ms takes CPU the measured processes need on a small machine (about 2 s
    # of wall time of a diffusers run on 2 CPUs).
    memory: list[Sample] = field(default_factory=list)
    timeout: float = 600.0  # at least `--timeout`

    def run(self, cwd: Path, *, sample_memory: bool = False) -> Sample:
        environment = {**os.environ, **self.env}
        errors = tempfile.TemporaryFile()
        started = time.perf_counter()
        process = subprocess.Popen(self.command, cwd=cwd, env=environment,
                                   stdout=subprocess.DEVNULL, stderr=errors)
        deadline = started + max(self.timeout, TIMEOUT[0])
        tree_peak = pss_peak = 0
        polls = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            if sample_memory and polls % 10 == 0:  # every 20 ms: the process and workers
                rss, pss = tree_memory_kb(process.pid)
                tree_peak, pss_peak = max(tree_peak, rss), max(pss_peak, pss)
            polls += 1
            time.sleep(0.002)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
        errors.close()
        if process.returncode not in self.ok_codes or "Traceback" in stderr:
            raise SystemExit(f"{self.label}: exit {process.returncode}\n{stderr[-3000:]}")
        sample = Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss,
                        process.returncode, max(tree_peak, usage.ru_maxrss), pss_peak)
        (self.memory if sample_memory else self.samples).append(sample)
        return sample

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(s, attribute) for s in self.samples)


def tree_memory_kb(root: int) -> tuple[int, int]:
    """Resident memory of `root` and every process below it, summed (from /proc; 0
    elsewhere), and their proportional set sizes summed: forked workers share the pages
    they inherited and have not written, which the first sum counts once per process."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0, 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    total = pss = 0
    pending = [root]
    while pending:
        pid = pending.pop()
        total += rss.get(pid, 0)
        pss += proportional_kb(pid)
        pending.extend(child for child, parent in parents.items() if parent == pid)
    return total, pss


def proportional_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as stream:
            for line in stream:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def torch_tree() -> Path:
    out = subprocess.run([sys.executable, "-c",
                          "import torch, os; print(os.path.dirname(torch.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def byte_compile_ckptlint() -> None:
    """Write ckptlint's `.pyc` files, as `pip install` does: an editable install run under
    PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module anew on every run
    (about 25 ms for a clean file, more for a run that analyses)."""
    import ckptlint

    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    str(Path(ckptlint.__file__).parent)], check=True)


def find_tool(name: str, explicit: str | None, candidates: list[Path]) -> str | None:
    if explicit:
        return explicit
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def tree_size(tree: Path) -> tuple[int, int]:
    files = lines = 0
    for path in tree.rglob("*"):
        if path.suffix in (".py", ".pyi") and path.is_file():
            files += 1
            with open(path, "rb") as stream:
                lines += stream.read().count(b"\n")
    return files, lines


def fresh_process_floor(relative: str, edited: Path) -> Measure:
    """What no cache can spare a fresh `ckptlint check` of an edited file: the interpreter's
    start, the imports of the command line and libcst, and libcst's parse of the file (its
    analysis is libcst-based). Timed alternating with the edit itself."""
    return Measure(f"the floor of a fresh process for {relative}: start, imports, libcst parse",
                   [sys.executable, "-c", "import sys, ckptlint.cli, libcst\n"
                    "libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())",
                    str(edited)])


def ckptlint_stats(command: list[str], arguments: list[str], cwd: Path,
                   env: dict[str, str]) -> dict:
    out = subprocess.run([*command, "check", *arguments], cwd=cwd,
                         env={**os.environ, **env, "CKPTLINT_STATS": "1"},
                         capture_output=True, text=True)
    for line in reversed(out.stderr.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--small-runs", type=int, default=11,
                        help="runs for the one-file and --version measures")
    parser.add_argument("--tree", type=Path, default=None)
    parser.add_argument("--ckptlint", default=None)
    parser.add_argument("--ruff", default=None)
    parser.add_argument("--torchfix", default=os.environ.get("TORCHFIX"))
    parser.add_argument("--torchfix-runs", type=int, default=1)
    parser.add_argument("--torchfix-timeout", type=float, default=1800.0)
    parser.add_argument("--no-torchfix", action="store_true")
    parser.add_argument("--site-dense", type=Path, default=None,
                        help="a package folder dense in checkpoint sites (diffusers' `diffusers/`"
                             " from `pip download --no-deps diffusers`, unpacked): measured too")
    parser.add_argument("--edit", action="append", default=None,
                        help="a file of --site-dense (relative) re-linted after a one-line edit;"
                             " default: " + ", ".join(DEFAULT_EDITS))
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one measured run may take (raise it on a loaded machine)")
    parser.add_argument("--only-site-dense", action="store_true",
                        help="skip the torch tree")
    parser.add_argument("--write", type=Path, default=None, help="write the report here")
    parser.add_argument("--json", type=Path, default=None, help="write raw samples here")
    args = parser.parse_args()
    TIMEOUT[0] = args.timeout

    bindir = Path(sys.executable).parent
    ckptlint = find_tool("ckptlint", args.ckptlint, [bindir / "ckptlint"])
    ruff = find_tool("ruff", args.ruff, [bindir / "ruff"])
    torchfix = None if args.no_torchfix else find_tool(
        "torchfix", args.torchfix, [REPO / "bench" / ".torchfix-venv" / "bin" / "torchfix"])
    if ckptlint is None or ruff is None:
        raise SystemExit("ckptlint and ruff must be installed (pip install -e . ruff)")
    byte_compile_ckptlint()
    reports = []
    if args.site_dense is not None:
        reports.append(site_dense(args, ckptlint, ruff))
    if not args.only_site_dense:
        reports.insert(0, torch_report(args, ckptlint, ruff, torchfix))
    report = "\n".join(reports)
    print(report)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(report)


def torch_report(args, ckptlint: str, ruff: str, torchfix: str | None) -> str:
    tree = args.tree or torch_tree()
    work = Path(tempfile.mkdtemp(prefix="ckptlint-bench-"))
    # An empty configuration of its own: the tree's surroundings (this repository's
    # pyproject.toml, when torch is installed in its .venv) must not change the measure.
    (work / "ckptlint.toml").write_text("")
    ckptlint_command = [ckptlint]
    config_option = ["--config", str(work / "ckptlint.toml")]
    cache = work / "cache"
    (work / "clean.py").write_text(CLEAN_FILE)
    (work / "site.py").write_text(SITE_FILE)
    no_cache_env = {"CKPTLINT_CACHE_DIR": str(work / "unused-cache")}
    files, lines = tree_size(tree)
    load_before = os.getloadavg()

    cold = [
        Measure("ckptlint --no-cache", [*ckptlint_command, "check", *config_option, "--no-cache",
                                        str(tree)], env=no_cache_env),
        Measure("ruff check --no-cache", [ruff, "check", "--no-cache", "--isolated",
                                          "--exit-zero", "--quiet", str(tree)]),
    ]
    for _ in range(args.runs):
        for measure in cold:
            measure.run(work)
    torchfix_measure = None
    if torchfix:
        torchfix_measure = Measure("torchfix --select TOR003", [torchfix, "--select", "TOR003",
                                                                 str(tree)],
                                   timeout=args.torchfix_timeout, ok_codes=(0, 1, -9))
        for _ in range(args.torchfix_runs):
            torchfix_measure.run(work)

    warm = Measure("ckptlint (warm cache)", [*ckptlint_command, "check", *config_option,
                                             str(tree)],
                   env={"CKPTLINT_CACHE_DIR": str(cache)})
    warm.run(work)  # prime
    warm.samples.clear()
    small = [
        Measure("ckptlint --version", [*ckptlint_command, "--version"], ok_codes=(0,)),
        Measure("ckptlint check clean.py (no checkpoint call)",
                [*ckptlint_command, "check", *config_option, "--no-cache", "clean.py"],
                env=no_cache_env),
        Measure("ckptlint check site.py (one checkpoint call)",
                [*ckptlint_command, "check", *config_option, "--no-cache", "site.py"],
                env=no_cache_env),
    ]
    for _ in range(args.runs):
        warm.run(work)
    for _ in range(args.small_runs):
        for measure in small:
            measure.run(work)
    load_after = os.getloadavg()
    stats = ckptlint_stats([*ckptlint_command], [*config_option, "--no-cache", str(tree)],
                           work, no_cache_env)
    report = render(tree, files, lines, cold, torchfix_measure, warm, small, stats, args,
                    load_before, load_after)
    if args.json:
        args.json.write_text(json.dumps({
            m.label: [s.__dict__ for s in m.samples]
            for m in [*cold, *( [torchfix_measure] if torchfix_measure else []), warm, *small]
        }, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return report


def site_dense(args, ckptlint: str, ruff: str) -> str:
    """The site-dense tree, copied (the edits must not touch the original): cold against ruff,
    warm, and each `--edit` file re-linted alone after a one-line edit, the cache primed by a
    whole-tree run (an editor or pre-commit loop)."""
    work = Path(tempfile.mkdtemp(prefix="ckptlint-bench-dense-"))
    tree = work / args.site_dense.resolve().name
    shutil.copytree(args.site_dense, tree, ignore=shutil.ignore_patterns("__pycache__"))
    (work / "ckptlint.toml").write_text("")
    config_option = ["--config", str(work / "ckptlint.toml")]
    no_cache_env = {"CKPTLINT_CACHE_DIR": str(work / "unused-cache")}
    cache_env = {"CKPTLINT_CACHE_DIR": str(work / "cache")}
    files, lines = tree_size(tree)
    load_before = os.getloadavg()
    cold = [
        Measure("ckptlint --no-cache", [ckptlint, "check", *config_option, "--no-cache",
                                        str(tree)], env=no_cache_env),
        Measure("ruff check --no-cache", [ruff, "check", "--no-cache", "--isolated",
                                          "--exit-zero", "--quiet", str(tree)]),
    ]
    for _ in range(args.runs):
        for measure in cold:
            measure.run(work)
    for measure in cold:
        measure.run(work, sample_memory=True)
    warm = Measure("ckptlint (warm cache)", [ckptlint, "check", *config_option, str(tree)],
                   env=cache_env)
    warm.run(work)  # prime
    warm.samples.clear()
    for _ in range(args.runs):
        warm.run(work)
    warm.run(work, sample_memory=True)
    edits = []
    for relative in args.edit or DEFAULT_EDITS:
        edited = tree / relative
        original = edited.read_text()
        measure = Measure(f"ckptlint {relative} after a one-line edit",
                          [ckptlint, "check", *config_option, str(edited)], env=cache_env)
        # Only a file holding a site is parsed with libcst (the others need no floor).
        analysed = ckptlint_stats([ckptlint], [*config_option, "--no-cache", str(edited)],
                                  work, no_cache_env).get("confirmed")
        measures = [measure, fresh_process_floor(relative, edited)] if analysed else [measure]
        for run in range(args.runs + 1):
            edited.write_text(f"{original}# bench edit {run}\n")
            for each in measures:
                each.run(work, sample_memory=run == args.runs)
        edited.write_text(original)
        edits += measures
    load_after = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)
    ckpt, ruff_measure = cold

    def row(measure: Measure, compare: bool = True) -> str:
        wall, cpu = measure.median("wall"), measure.median("cpu")
        rss = max(s.tree_rss_kb for s in measure.memory) / 1024
        pss = max(s.tree_pss_kb for s in measure.memory) / 1024
        ratio = (f"{wall / ruff_measure.median('wall'):.1f} / "
                 f"{cpu / ruff_measure.median('cpu'):.1f}") if compare else ""
        return (f"| {measure.label} ({len(measure.samples)} runs) | {wall:.2f} s | {cpu:.2f} s "
                f"| {rss:.0f} MiB | {pss:.0f} MiB | {ratio} |")

    return "\n".join([
        "## Site-dense tree",
        "",
        f"Tree: `{args.site_dense}` ({files} files, {lines:,} lines), copied; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after. Peak memory here is the "
        "whole process tree (main process and workers together, sampled every 20 ms in one "
        "more run of each measure, not timed): resident sizes summed (a page the workers "
        "share with the main process counts once per process) and proportional sizes summed "
        "(each page once).",
        "",
        "| measure | wall (median) | CPU user+sys | peak RSS (tree) | peak PSS (tree) "
        "| ratio to ruff (wall / CPU) |",
        "|---|---:|---:|---:|---:|---:|",
        row(ckpt), row(ruff_measure), row(warm, compare=False),
        *(row(measure, compare=False) for measure in edits),
        "",
    ])


def render(tree: Path, files: int, lines: int, cold: list[Measure], torchfix: Measure | None,
           warm: Measure, small: list[Measure], stats: dict, args, load_before,
           load_after) -> str:
    ckptlint, ruff = cold
    rows = ["| measure | wall (median) | CPU user+sys | peak RSS | ratio to ruff (wall / CPU) |",
            "|---|---:|---:|---:|---:|"]

    def row(measure: Measure, compare: bool = True) -> str:
        wall, cpu = measure.median("wall"), measure.median("cpu")
        rss = max(s.rss_kb for s in measure.samples) / 1024
        ratio = ""
        if compare:
            ratio = (f"{wall / ruff.median('wall'):.2f} / {cpu / ruff.median('cpu'):.2f}")
        runs = len(measure.samples)
        return (f"| {measure.label} ({runs} run{'s' if runs != 1 else ''}) | {wall:.2f} s | "
                f"{cpu:.2f} s | {rss:.0f} MiB | {ratio} |")

    rows.append(row(ckptlint))
    rows.append(row(ruff))
    if torchfix is not None:
        rows.append(row(torchfix))
    rows.append(row(warm))
    for measure in small:
        rows.append(row(measure, compare=False))
    machine = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
               f"{platform.python_version()}; load average {load_before[0]:.1f} before, "
               f"{load_after[0]:.1f} after")
    versions = []
    for name, command in (("ckptlint", [ckptlint.command[0], "--version"]),
                          ("ruff", [ruff.command[0], "--version"])):
        try:
            versions.append(subprocess.run(command, capture_output=True, text=True)
                            .stdout.strip())
        except OSError:
            versions.append(f"{name} ?")
    lines_out = [
        "# Performance",
        "",
        f"Tree: `{tree}` ({files} files, {lines:,} lines). Machine: {machine}. "
        f"Tools: {', '.join(versions)}. Produced by `python bench/bench.py --runs {args.runs}`"
        " (alternating runs, medians).",
        "",
        *rows,
        "",
        "ckptlint's own account of the cold run (`CKPTLINT_STATS=1`): "
        f"{stats.get('files', '?')} files read, {stats.get('candidates', '?')} parsed with "
        f"`ast` after the text tests, {stats.get('confirmed', '?')} confirmed and analysed "
        f"with libcst, {stats.get('jobs', '?')} worker processes.",
        "",
    ]
    return "\n".join(lines_out)


if __name__ == "__main__":
    main()
