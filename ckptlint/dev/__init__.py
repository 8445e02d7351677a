"""Contributor tools, run from a source checkout: `python -m ckptlint.dev --help`.

- `rule-table [--check]`: write (or check) the README's rule table from the registry.
- `new-rule CKPnnn rule-name`: add a rule: its module, page, fixture and registry entry.

They edit the checkout this package lives in (README.md and rules/ next to `ckptlint/`);
from an installed wheel they stop with one line.
"""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


class DevError(Exception):
    """A usage error: printed as one line, exit 2."""


def checkout() -> Path:
    """The source checkout this package belongs to."""
    if not (CHECKOUT / "README.md").is_file() or not (CHECKOUT / "rules").is_dir():
        raise DevError(f"{CHECKOUT} is not a source checkout of ckptlint (no README.md and "
                       "rules/ there): run this from a clone of the repository")
    return CHECKOUT
