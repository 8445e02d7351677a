"""`ckptlint --show-settings`: the configuration a run would use, and where each part comes
from (as ruff's `--show-settings`)."""

from __future__ import annotations

from dataclasses import fields

from ckptlint.config import Config
from ckptlint.versions import versions_in_force

# Packages whose version in force changes findings (CKP104).
VERSIONED_PACKAGES = ("transformers", "trl")


def render_settings(config: Config) -> str:
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
    return "\n".join(lines)
