"""Rule pages (`rules/CKPnnn-<name>.md`) and the `ckptlint rule` command.

The pages live in the top-level `rules/` folder of the source tree; a wheel ships them as the
package `ckptlint.rule_pages_data` (see `package-dir` in pyproject.toml). In a source checkout
or an editable install the folder is read in place.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

import click

from ckptlint.registry import RULES, RuleInfo

# The sections of every page, in order (tests/test_rule_pages.py checks them, and
# `python -m ckptlint.dev new-rule` writes them).
SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety",
            "Options", "Finding data", "References")

PACKAGE = Path(__file__).resolve().parent
INSTALLED_PAGES = PACKAGE / "rule_pages_data"
SOURCE_PAGES = PACKAGE.parent / "rules"


def pages_dir() -> Path:
    """Where the pages are: inside the installed package, else the source tree's `rules/`."""
    if INSTALLED_PAGES.is_dir() and any(INSTALLED_PAGES.glob("CKP*.md")):
        return INSTALLED_PAGES
    return SOURCE_PAGES


def page_name(info: RuleInfo) -> str:
    return f"{info.code}-{info.name}.md"


def page_filename(code: str) -> str:
    return page_name(RULES[code])


def page_path(code: str) -> Path | None:
    path = pages_dir() / page_filename(code)
    return path if path.is_file() else None


def page_text(code: str) -> str | None:
    path = page_path(code)
    return path.read_text(encoding="utf-8") if path is not None else None


def section(text: str, title: str) -> str | None:
    """The body of `## title` in a page (up to the next `## ` heading), stripped."""
    lines = text.splitlines()
    body: list[str] | None = None
    in_fence = False
    for line in lines:
        if line.startswith("```"):
            in_fence = not in_fence
        if not in_fence and line.startswith("## "):
            if body is not None:
                break
            if line[3:].strip() == title:
                body = []
            continue
        if body is not None:
            body.append(line)
    return "\n".join(body).strip() if body is not None else None


def code_blocks(text: str) -> list[str]:
    """The ```python blocks of a page section, in order."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if current is None and line.strip().startswith("```python"):
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


@lru_cache(maxsize=1)
def docs_base() -> str | None:
    """Where the pages are published: the package's `Rules`, else `Repository` project URL."""
    try:
        from importlib import metadata

        urls = metadata.metadata("ckptlint").get_all("Project-URL") or []
    except Exception:  # noqa: BLE001 - metadata is a nicety here
        return None
    labelled = {}
    for entry in urls:
        label, _, url = entry.partition(",")
        labelled[label.strip().lower()] = url.strip().rstrip("/")
    if "rules" in labelled:
        return labelled["rules"]
    for label in ("repository", "source", "homepage"):
        if label in labelled:
            return f"{labelled[label]}/blob/main/rules"
    return None


def help_uri(code: str) -> str:
    """An absolute URI of the rule's page: the published page, else the installed file."""
    base = docs_base()
    if base is not None:
        return f"{base}/{page_filename(code)}"
    path = page_path(code) or (pages_dir() / page_filename(code))
    return path.resolve().as_uri()


def find_code(query: str) -> str | None:
    wanted = query.strip()
    if wanted.upper() in RULES:
        return wanted.upper()
    for code, info in RULES.items():
        if info.name == wanted.lower():
            return code
    return None


def info_json(info: RuleInfo) -> dict:
    return {"code": info.code, "name": info.name, "severity": info.severity,
            "summary": info.summary, "default_on": info.default_on,
            "fix": info.fix.value, "dynamic": info.dynamic.value,
            "page": page_text(info.code)}


@click.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every code with its name.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]),
              default="text", show_default=True)
def rule(code: str | None, show_all: bool, output_format: str) -> None:
    """Print the page of rule CODE (a code such as CKP101, or a name), or list all rules."""
    if show_all:
        if output_format == "json":
            click.echo(json.dumps([info_json(info) for info in RULES.values()], indent=2))
            return
        width = max(len(info.name) for info in RULES.values())
        for info in RULES.values():
            state = "" if info.default_on else "  (off unless selected)"
            click.echo(f"{info.code}  {info.name.ljust(width)}  {info.severity:<7}  "
                       f"{info.summary}{state}")
        return
    if code is None:
        click.echo("ckptlint: error: give a rule code (e.g. CKP101) or --all", err=True)
        sys.exit(2)
    found = find_code(code)
    if found is None:
        click.echo(f"ckptlint: error: unknown rule `{code}` (see `ckptlint rule --all`)",
                   err=True)
        sys.exit(2)
    if output_format == "json":
        click.echo(json.dumps(info_json(RULES[found]), indent=2))
        return
    text = page_text(found)
    if text is None:
        info = RULES[found]
        click.echo(f"ckptlint: error: no page for {found} ({info.name}) in {pages_dir()}",
                   err=True)
        sys.exit(2)
    click.echo(text, nl=not text.endswith("\n"))
