"""`[tool.ckptlint]` configuration: discovery, validation and the merged settings."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from ckptlint.analysis.apis import API_MODES
from ckptlint.registry import RULES, codes_matching

DEFAULT_EXCLUDES = (".git", ".venv", "venv", "build", "dist", "__pycache__", ".tox",
                    "node_modules")
# Files a folder's walk lints (`include`; `extend-include` adds): Python, stubs, notebooks.
DEFAULT_INCLUDE = ("*.py", "*.pyi", "*.ipynb")
DEFAULT_MAX_FILE_SIZE = 5 * 1024 * 1024
# Syntax nodes (tokens) a file may have to be analysed. The largest hand-written files of
# torch, sympy and libcst have under 60,000; analysing 100,000 takes libcst 200-450 MB.
DEFAULT_MAX_ANALYSIS_NODES = 100_000
DEFAULT_MIN_BYTES_FREED = 1024 * 1024
# `state-changes`: which changes of state CKP201/CKP204 report. "runtime": those that can run
# between a segment's forward and its replay; "any": also those made only in configuration.
STATE_CHANGES = ("runtime", "any")


class ConfigError(Exception):
    """A configuration or usage problem; the CLI prints it and exits 2."""


@dataclass(frozen=True)
class Config:
    root: Path = field(default_factory=Path.cwd)  # folder of the config file, else cwd
    path: Path | None = None  # the pyproject.toml (or --config file) read, if any
    # The folder of the linted files' project, whose declared dependencies and training setup
    # are read: the config file's folder, else the current directory or, for a path outside
    # it, the nearest folder above it that holds a project file (`nearest_project`); None:
    # `root`.
    project: Path | None = None
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    cli_extend_select: tuple[str, ...] = ()
    cli_ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    default_excludes: tuple[str, ...] = DEFAULT_EXCLUDES
    include: tuple[str, ...] = DEFAULT_INCLUDE
    extend_include: tuple[str, ...] = ()
    src: tuple[Path, ...] = ()
    checkpoint_functions: tuple[tuple[str, str], ...] = ()
    segment_base_classes: tuple[str, ...] = ()
    transformers_version: str | None = None  # also `versions.transformers`
    # `versions`: (package, version) pairs the project runs (`ckptlint.versions`).
    versions: tuple[tuple[str, str], ...] = ()
    max_depth: int = 4
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    max_analysis_nodes: int = DEFAULT_MAX_ANALYSIS_NODES
    cache_dir: Path | None = None
    # Read from a file the user named (`--config FILE`): its `cache-dir` may point anywhere.
    named_on_command_line: bool = False
    profile_min_bytes_freed: int = DEFAULT_MIN_BYTES_FREED
    state_changes: str = "runtime"

    # -- rule selection ----------------------------------------------------------------
    def enabled_codes(self) -> frozenset[str]:
        """Codes on after selection: the config's layer, then the command line's.

        Within a layer the most specific selector wins (`--ignore CKP1 --extend-select
        CKP102` keeps CKP102), an ignore winning a tie; CKP999 goes only when ignored by name.
        """
        enabled = ({code for code, info in RULES.items() if info.default_on}
                   if self.select is None else set())
        apply_layer(enabled, (*(self.select or ()), *self.extend_select), self.ignore)
        apply_layer(enabled, self.cli_extend_select, self.cli_ignore)
        if "CKP999" not in (*self.ignore, *self.cli_ignore):
            enabled.add("CKP999")
        return frozenset(enabled)

    def ignored_for_file(self, path: Path) -> frozenset[str]:
        """Codes that `per-file-ignores` turns off for this file."""
        from ckptlint.globs import glob_matches

        relative = relative_posix(path, self.root)
        codes: set[str] = set()
        for pattern, selectors in self.per_file_ignores:
            if relative is not None and glob_matches(pattern, relative):
                for selector in selectors:
                    codes.update(codes_matching(selector))
        return frozenset(codes)

    @property
    def includes(self) -> tuple[str, ...]:
        return (*self.include, *self.extend_include)

    @cached_property
    def include_suffixes(self) -> tuple[str, ...] | None:
        """The suffixes `include` names when each pattern is `*.suffix` (the usual case: one
        `endswith` per name), else None (each name is matched against the globs)."""
        if all(p.startswith("*.") and not any(c in p[1:] for c in "*?[/") for p in self.includes):
            return tuple(p[1:] for p in self.includes)
        return None

    def is_included(self, path: str) -> bool:
        """Whether a file found in a folder's walk is one to lint (`include`,
        `extend-include`: gitignore-style globs against its path relative to the config)."""
        suffixes = self.include_suffixes
        if suffixes is not None:
            return path.endswith(suffixes)
        from ckptlint.globs import glob_matches

        relative = relative_posix(Path(path), self.root) or os.path.basename(path)
        return any(glob_matches(pattern, relative) for pattern in self.includes)

    @property
    def excludes(self) -> tuple[str, ...]:
        return (*self.exclude, *self.extend_exclude)

    @property
    def project_root(self) -> Path:
        return self.project if self.project is not None else self.root

    @property
    def import_roots(self) -> tuple[Path, ...]:
        if self.src:
            return self.src
        return tuple(p for p in (self.root, self.root / "src") if p.is_dir())

    @property
    def fingerprint(self) -> str:
        """A stable text of every setting that affects findings (for the cache key)."""
        return repr((sorted(self.enabled_codes()), self.per_file_ignores,
                     self.checkpoint_functions, self.segment_base_classes,
                     self.transformers_version, self.versions, self.max_depth,
                     self.max_file_size, self.max_analysis_nodes,
                     tuple(str(p) for p in self.import_roots), self.state_changes))


def apply_layer(enabled: set[str], selectors: tuple[str, ...], ignores: tuple[str, ...]) -> None:
    for code in RULES:
        added = max((len(s) for s in selectors if code.startswith(s)), default=-1)
        removed = max((len(s) for s in ignores if code.startswith(s)), default=-1)
        if added > removed:
            enabled.add(code)
        elif removed >= 0:
            enabled.discard(code)


def relative_posix(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
    except (OSError, RuntimeError):  # a symlink loop: resolve() gives up
        try:
            return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
        except ValueError:
            return None


# -- reading -----------------------------------------------------------------------------
def find_config_file(start: Path) -> Path | None:
    """The nearest pyproject.toml upward from `start` that has a `[tool.ckptlint]` table."""
    folder = start.resolve()
    if not os.path.isdir(folder):
        folder = folder.parent
    for candidate_dir in (folder, *folder.parents):
        candidate = candidate_dir / "pyproject.toml"
        if os.path.isfile(candidate):  # (False, not an error, in a folder we may not read)
            try:
                data = candidate.read_bytes()
            except OSError:
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as error:
                if b"tool.ckptlint" in data:
                    raise not_utf8(candidate, error) from None
                continue
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as error:
                if "tool.ckptlint" in text:
                    raise ConfigError(f"{candidate}: invalid TOML: {error}") from None
                continue
            if isinstance(data.get("tool"), dict) and "ckptlint" in data["tool"]:
                return candidate
    return None


def not_utf8(path: Path, error: UnicodeDecodeError) -> ConfigError:
    return ConfigError(f"{path}: cannot read: not UTF-8 (byte {error.object[error.start]:#04x} "
                       f"at offset {error.start}), and TOML files must be UTF-8")


def load_config(paths: list[str] | None = None, config_file: str | None = None) -> Config:
    """The settings for a run over `paths`: the named config file, else the nearest one."""
    if config_file is not None:
        path = Path(config_file)
        if not os.path.isfile(path):
            raise ConfigError(f"{config_file}: config file not found")
        return read_config(path, required=False, named_on_command_line=True)
    start = Path(paths[0]) if paths and paths[0] != "-" else Path.cwd()
    # A path that does not exist yet (an editor's unsaved buffer named by --stdin-filename)
    # is resolved from its nearest existing folder.
    start = start.absolute()
    while not os.path.exists(start) and start != start.parent:
        start = start.parent
    found = find_config_file(start)
    if found is None:
        return Config(project=nearest_project(start))
    return read_config(found, required=True)


# Files that make a folder a project's: where its dependencies are declared.
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")


def nearest_project(start: Path) -> Path:
    """Without a config file, the project of the files linted: the current directory when
    `start` is inside it (as before); else the nearest folder upward from `start` holding a
    project file (or a `requirements*.txt`), or `start`'s own folder when none does, never
    the current directory, which is another project's."""
    folder = start.resolve()
    if not os.path.isdir(folder):
        folder = folder.parent
    here = Path.cwd().resolve()
    if folder.is_relative_to(here):
        return here
    for candidate in (folder, *folder.parents):
        try:
            if any(os.path.isfile(candidate / name) for name in PROJECT_FILES) \
                    or any(candidate.glob("requirements*.txt")):
                return candidate
        except OSError:  # a folder we may not read
            continue
    return folder


def read_config(path: Path, required: bool, named_on_command_line: bool = False) -> Config:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise not_utf8(path, error) from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error}") from None
    table = data.get("tool", {}).get("ckptlint") if isinstance(data.get("tool"), dict) else None
    if table is None:
        # A dedicated file (--config ckptlint.toml) may hold the keys at top level.
        table = {} if path.name == "pyproject.toml" else data
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.ckptlint] must be a table")
    return parse_table(table, path, named_on_command_line)


def parse_table(table: dict[str, Any], path: Path, named_on_command_line: bool = False) -> Config:
    root = path.parent.resolve()
    reader = _Reader(table, path)
    settings: dict[str, Any] = {"root": root, "path": path, "project": root,
                                "named_on_command_line": named_on_command_line}
    for key in table:
        if key not in _KEYS:
            known = ", ".join(sorted(_KEYS))
            raise ConfigError(
                f"{path}: unknown key `{key}` in [tool.ckptlint] (known keys: {known})")
    if "select" in table:
        settings["select"] = reader.codes("select")
    settings["extend_select"] = reader.codes("extend-select") if "extend-select" in table else ()
    settings["ignore"] = reader.codes("ignore") if "ignore" in table else ()
    if "per-file-ignores" in table:
        mapping = reader.table("per-file-ignores")
        entries = []
        for glob, codes in mapping.items():
            entries.append((glob, reader.codes_value(f"per-file-ignores.{glob}", codes)))
        check_globs(mapping, f"{path}: key `per-file-ignores`")
        settings["per_file_ignores"] = tuple(entries)
    for key, attr in (("exclude", "exclude"), ("extend-exclude", "extend_exclude"),
                      ("include", "include"), ("extend-include", "extend_include"),
                      ("segment-base-classes", "segment_base_classes")):
        if key in table:
            settings[attr] = reader.strings(key)
            if key != "segment-base-classes":
                check_globs(settings[attr], f"{path}: key `{key}`")
    if "exclude" in table:
        settings["default_excludes"] = ()
    if "src" in table:
        settings["src"] = tuple((root / entry).resolve() for entry in reader.strings("src"))
    if "checkpoint-functions" in table:
        mapping = reader.table("checkpoint-functions")
        entries = []
        for name, mode in mapping.items():
            if mode not in API_MODES:
                raise ConfigError(
                    f"{path}: key `checkpoint-functions.{name}`: expected one of "
                    f"{', '.join(repr(m.value) for m in API_MODES)}, got {mode!r}")
            entries.append((name, mode))
        settings["checkpoint_functions"] = tuple(entries)
    if "versions" in table:
        mapping = reader.table("versions")
        settings["versions"] = tuple(sorted(
            (package, reader.version_value(f"versions.{package}", version))
            for package, version in mapping.items()))
        settings["transformers_version"] = mapping.get("transformers")
    if "transformers-version" in table:
        alias = reader.version("transformers-version")
        if settings.get("transformers_version") not in (None, alias):
            raise ConfigError(f"{path}: key `transformers-version`: {alias!r} differs from "
                              f"`versions.transformers` ({settings['transformers_version']!r}); "
                              "keep one of them")
        settings["transformers_version"] = alias
    if "state-changes" in table:
        settings["state_changes"] = reader.choice("state-changes", STATE_CHANGES)
    for key, attr in (("max-depth", "max_depth"), ("max-file-size", "max_file_size"),
                      ("max-analysis-nodes", "max_analysis_nodes"),
                      ("profile-min-bytes-freed", "profile_min_bytes_freed")):
        if key in table:
            settings[attr] = reader.non_negative_int(key)
    if "cache-dir" in table:
        settings["cache_dir"] = reader.cache_dir("cache-dir", root,
                                                 inside=not named_on_command_line)
    return Config(**settings)


def check_globs(patterns, where: str) -> None:
    """ConfigError for a glob that cannot be matched (`[z-a]`), when the configuration is
    loaded: every command that loads it stops there, before any file is looked at."""
    import re

    from ckptlint.globs import glob_regex

    for pattern in patterns:
        try:
            glob_regex(pattern)
        except re.error as error:
            raise ConfigError(f"{where}: invalid glob {pattern!r}: {error.msg}") from None


_KEYS = frozenset({
    "select", "extend-select", "ignore", "per-file-ignores", "exclude", "extend-exclude", "src",
    "checkpoint-functions", "segment-base-classes", "transformers-version", "max-depth",
    "max-file-size", "max-analysis-nodes", "cache-dir", "profile-min-bytes-freed", "versions",
    "state-changes", "include", "extend-include",
})


@dataclass
class _Reader:
    data: dict[str, Any]
    path: Path

    def fail(self, key: str, expected: str, value: Any) -> ConfigError:
        return ConfigError(f"{self.path}: key `{key}`: expected {expected}, got {value!r}")

    def string(self, key: str) -> str:
        value = self.data[key]
        if not isinstance(value, str):
            raise self.fail(key, "a string", value)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of strings", value)
        return tuple(value)

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.data[key]
        if value not in choices:
            raise self.fail(key, f"one of {', '.join(repr(c) for c in choices)}", value)
        return value

    def table(self, key: str) -> dict[str, Any]:
        value = self.data[key]
        if not isinstance(value, dict):
            raise self.fail(key, "a table", value)
        return value

    def codes(self, key: str) -> tuple[str, ...]:
        return self.codes_value(key, self.data[key])

    def codes_value(self, key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of rule codes or prefixes", value)
        for selector in value:
            if not codes_matching(selector):
                raise self.fail(key, "rule codes or prefixes such as \"CKP2\" or \"CKP201\"",
                                selector)
        return tuple(value)

    def cache_dir(self, key: str, root: Path, inside: bool) -> Path:
        """The folder named, from `root`; `inside`: it must stay inside `root` (no `..`, no
        absolute path elsewhere, no symbolic link leading out), as a project's own
        configuration is not trusted to write elsewhere."""
        value = self.string(key)
        folder = Path(os.path.normpath(root / value))
        if not inside:
            return folder
        try:
            resolved = folder.resolve()
        except (OSError, RuntimeError):  # a symbolic link loop
            resolved = None
        if (".." in Path(value).parts or resolved is None
                or not resolved.is_relative_to(root)):
            raise self.fail(key, f"a folder inside {root} (a project's configuration cannot "
                                 "put the cache elsewhere; use CKPTLINT_CACHE_DIR or --config)",
                            value)
        return folder

    def non_negative_int(self, key: str) -> int:
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(key, "a non-negative integer", value)
        return value

    def version(self, key: str) -> str:
        return self.version_value(key, self.data[key])

    def version_value(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or parse_version(value) is None:
            raise self.fail(key, "a version such as \"4.46.0\"", value)
        return value


def parse_version(text: str) -> tuple[int, ...] | None:
    parts = []
    for piece in text.strip().split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts) or None


def with_cli(config: Config, *, select=None, extend_select=None, ignore=None,
             extend_exclude=None) -> Config:
    """Command-line options over the configured ones (`--select` replaces, the others add)."""
    changes: dict[str, Any] = {}
    for name, value in (("select", select), ("extend_select", extend_select), ("ignore", ignore)):
        if value:
            for selector in value:
                if not codes_matching(selector):
                    option = name.replace("_", "-")
                    raise ConfigError(f"unknown rule selector `{selector}` in --{option}")
    if select:
        changes["select"] = tuple(select)
    if extend_select:
        changes["cli_extend_select"] = tuple(extend_select)
    if ignore:
        changes["cli_ignore"] = tuple(ignore)
    if extend_exclude:
        check_globs(extend_exclude, "--extend-exclude")
        changes["extend_exclude"] = (*config.extend_exclude, *extend_exclude)
    return replace(config, **changes)
