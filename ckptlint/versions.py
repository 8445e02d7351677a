"""Which versions of a library (transformers) the linted project runs, and where that comes from.

Order: the configuration (`versions = {transformers = "4.46.0"}`, or its alias
`transformers-version`); else the union of the ranges the project declares (`[project]
dependencies` and optional dependencies in pyproject.toml, `install_requires` and
`extras_require` in setup.cfg or setup.py, read statically, and `requirements*.txt`, all in the
configuration's folder); else the version installed where ckptlint runs; else unknown. A
requirement without a version admits every version.

The project's files are untrusted data: read as text (setup.py with `ast`, never run), size
capped, and anything unreadable or malformed is skipped.
"""

from __future__ import annotations

import ast
import configparser
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ckptlint.config import Config, parse_version, tomllib

MAX_DECLARATION_BYTES = 1024 * 1024
# `name [extras] specifiers ; marker` (PEP 508, without URLs: those pin nothing we can read).
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<specs>[^;@#]*)")
_SPECIFIER = re.compile(r"(~=|===|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.*+!-]*)")


class Source:
    CONFIG = "config"
    DECLARED = "declared"
    INSTALLED = "installed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Versions:
    """The versions in force: each declared range (`""` admits every version), and the files
    they come from."""

    ranges: tuple[str, ...]
    source: str
    origin: str = ""  # the file(s) or setting they come from, for people

    @property
    def text(self) -> str:
        """The range as specifiers (`==4.46.0`, `>=4.30,<5`, several joined by ` || `;
        `any version`, `unknown`)."""
        if self.source == Source.UNKNOWN:
            return "unknown"
        if any(not spec for spec in self.ranges):
            return "any version"
        return " || ".join(self.ranges)

    def admits_before(self, version: tuple[int, ...]) -> bool:
        """May the project run a release older than `version`? (True when unknown.)"""
        if self.source == Source.UNKNOWN:
            return True
        return any((lower := lower_bound(spec)) is None or lower < version
                   for spec in self.ranges)

    def admits_between(self, low: tuple[int, ...], high: tuple[int, ...]) -> bool:
        """May the project run a release from `low` up to (not including) `high`? (True when
        unknown.)"""
        if self.source == Source.UNKNOWN:
            return True
        return any(((lower := lower_bound(spec)) is None or lower < high)
                   and ((upper := upper_bound(spec)) is None or upper > low)
                   for spec in self.ranges)

    def all_from(self, version: tuple[int, ...]) -> bool:
        """Is every release the project may run `version` or later? (False when unknown.)"""
        if self.source == Source.UNKNOWN:
            return False
        return all((lower := lower_bound(spec)) is not None and lower >= version
                   for spec in self.ranges)


def lower_bound(spec: str) -> tuple[int, ...] | None:
    """The lowest release a specifier set admits, as far as its bounds tell (None: no bound)."""
    lowest: tuple[int, ...] | None = None
    for operator, text in _SPECIFIER.findall(spec):
        if operator in ("!=", "<", "<="):
            continue
        version = parse_version(text.rstrip(".*"))
        if version is None:
            continue
        if operator == ">":  # a post-release could follow; the next release is a safe floor
            version = (*version[:-1], version[-1] + 1) if version else version
        if lowest is None or version > lowest:
            lowest = version
    return lowest


def upper_bound(spec: str) -> tuple[int, ...] | None:
    """A release just above every one a specifier set admits, as far as its bounds tell
    (None: no bound): `<2.0` gives 2.0, `<=1.4` and `==1.4.2` give the next patch."""
    highest: tuple[int, ...] | None = None
    for operator, text in _SPECIFIER.findall(spec):
        if operator not in ("<", "<=", "==") or text.endswith("*"):
            continue
        version = parse_version(text)
        if version is None:
            continue
        if operator != "<":
            version = (*version, 1)  # 1.4.2 < 1.4.2.1: just above it
        if highest is None or version < highest:
            highest = version
    return highest


def versions_in_force(config: Config, package: str = "transformers") -> Versions:
    configured = dict(config.versions).get(package)
    if package == "transformers":
        configured = configured or config.transformers_version
    if configured is not None:
        return Versions((f"=={configured}",), Source.CONFIG,
                        str(config.path) if config.path is not None else "configuration")
    declared = declared_ranges(config.project_root, package)
    if declared is not None:
        return declared
    installed = installed_version(package)
    if installed is not None:
        return Versions((f"=={installed}",), Source.INSTALLED, "installed here")
    return Versions((), Source.UNKNOWN)


@lru_cache(maxsize=8)
def installed_version(package: str) -> str | None:
    """The version installed where ckptlint runs, read from package metadata (never
    imported)."""
    from importlib import metadata  # (only here: it costs most runs 15 ms for nothing)

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def declared_ranges(root: Path, package: str) -> Versions | None:
    """The union of the ranges the project in `root` declares for `package`, or None."""
    wanted = canonical(package)
    ranges: list[str] = []
    origins: list[str] = []
    for path, requirements in declarations(root):
        found = [specs for name, specs in map(parse_requirement, requirements)
                 if name == wanted]
        if found:
            ranges.extend(found)
            origins.append(path.name)
    if not ranges:
        return None
    return Versions(tuple(dict.fromkeys(ranges)), Source.DECLARED, ", ".join(origins))


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(text: str) -> tuple[str, str]:
    """(canonical name, specifiers without spaces) of one requirement line."""
    match = _REQUIREMENT.match(text)
    if match is None:
        return "", ""
    specs = ",".join(f"{op}{version}" for op, version in _SPECIFIER.findall(match["specs"]))
    return canonical(match["name"]), specs


def declarations(root: Path):
    """(file, requirement strings) for each declaration file in `root`."""
    readers = (("pyproject.toml", pyproject_requirements), ("setup.cfg", setup_cfg_requirements),
               ("setup.py", setup_py_requirements))
    for name, reader in readers:
        text = read_text(root / name)
        if text is not None:
            yield root / name, reader(text)
    for path in sorted(root.glob("requirements*.txt")):
        text = read_text(path)
        if text is not None:
            yield path, [line for line in text.splitlines()
                         if line.strip() and not line.lstrip().startswith(("#", "-"))]


def read_text(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_DECLARATION_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def pyproject_requirements(text: str) -> list[str]:
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError:
        return []
    if not isinstance(project, dict):
        return []
    found = strings(project.get("dependencies"))
    optional = project.get("optional-dependencies")
    if isinstance(optional, dict):
        for group in optional.values():
            found.extend(strings(group))
    return found


def setup_cfg_requirements(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    found: list[str] = []
    if parser.has_option("options", "install_requires"):
        found.extend(parser.get("options", "install_requires").splitlines())
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            found.extend(value.splitlines())
    return [line for line in found if line.strip()]


def setup_py_requirements(text: str) -> list[str]:
    """String literals of `install_requires=[...]` and `extras_require={...: [...]}` in any
    call (read with `ast`; names and computed lists are not followed)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "install_requires":
                found.extend(literal_strings(keyword.value))
            elif keyword.arg == "extras_require" and isinstance(keyword.value, ast.Dict):
                for value in keyword.value.values:
                    found.extend(literal_strings(value))
    return found


def literal_strings(node: ast.expr) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [element.value for element in node.elts
                if isinstance(element, ast.Constant) and isinstance(element.value, str)]
    return []


def strings(value) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
