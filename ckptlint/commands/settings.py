"""`ckptlint --show-settings`: the configuration a run would use, and where each part comes
from (as ruff's `--show-settings`)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from ckptlint.config import Config
from ckptlint.versions import versions_in_force

# Packages whose version in force changes findings (CKP104, CKP601).
VERSIONED_PACKAGES = ("transformers", "trl")


def render_settings(config: Config, paths: list[str] | None = None) -> str:
    """The settings; `paths`: the files named on the command line, whose training setup
    (CKP601) is shown with the project's."""
    lines = [f"config file: {config.path if config.path is not None else 'none (defaults)'}",
             f"enabled codes: {', '.join(sorted(config.enabled_codes()))}"]
    for item in fields(config):
        if item.name == "path":
            continue
        value = getattr(config, item.name)
        if isinstance(value, tuple) and value and all(isinstance(v, tuple) for v in value):
            value = ", ".join(f"{key} = {inner}" for key, inner in value)
        elif isinstance(value, tuple):
            value = ", ".join(str(v) for v in value)
        lines.append(f"{item.name.replace('_', '-')}: {value if value not in (None, '') else '-'}")
    lines.append(f"import roots: {', '.join(str(p) for p in config.import_roots)}")
    for package in VERSIONED_PACKAGES:
        versions = versions_in_force(config, package)
        origin = f" ({versions.source}: {versions.origin})" if versions.origin \
            else f" ({versions.source})"
        lines.append(f"versions in force: {package} {versions.text}{origin}")
    lines.append("training setup (CKP601):")
    lines.extend(f"  {line}" for line in training_setup(config, paths or []).lines())
    return "\n".join(lines)


def training_setup(config: Config, paths: list[str]):
    from ckptlint.analysis.project import Project
    from ckptlint.analysis.setup import SetupReader, setup_scripts

    named = [Path(path).resolve() for path in paths
             if path.endswith(".py") and Path(path).is_file()]
    project = Project(list(config.import_roots))
    return SetupReader(config.project_root, project).setup(
        [*project.source_files(), *setup_scripts(config.project_root), *named])
