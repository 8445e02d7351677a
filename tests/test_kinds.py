"""The kinds (modes, site, scope, binding, change and write kinds) are enums whose members
read exactly as the strings they replaced: in f-strings, str(), JSON and comparisons, on
every supported Python (3.12 changed how a str-mixin enum formats by default)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptlint.analysis.apis import API_MODES, SITE_MODES, Mode, SiteKind
from ckptlint.analysis.bindings import ChangeHow
from ckptlint.analysis.scopes import BindingKind, ScopeKind
from ckptlint.analysis.segment import WriteKind
from ckptlint.analysis.sites import ModeSource
from ckptlint.config import ConfigError, parse_table
from ckptlint.finding_data import MODE

KINDS = (Mode, SiteKind, ModeSource, ScopeKind, BindingKind, ChangeHow, WriteKind)


def test_a_member_reads_as_its_value_everywhere() -> None:
    for kind in KINDS:
        for member in kind:
            assert str(member) == f"{member}" == format(member, "") == member.value
            assert json.dumps({member: [member]}) == json.dumps({member.value: [member.value]})
            assert member == member.value and hash(member) == hash(member.value)
            assert kind(member.value) is member


def test_the_mode_strings_are_spelled_once() -> None:
    assert MODE.values == tuple(mode.value for mode in SITE_MODES) == (
        "reentrant", "non-reentrant", "unknown")
    assert [mode.value for mode in API_MODES] == ["torch", "reentrant", "non-reentrant",
                                                  "reentrant-default"]


def test_checkpoint_functions_take_an_api_mode_not_a_site_mode() -> None:
    table = {"checkpoint-functions": {"my.ckpt": "unknown"}}
    with pytest.raises(ConfigError, match="expected one of 'torch', 'reentrant', "
                                          "'non-reentrant', 'reentrant-default', "
                                          "got 'unknown'$"):
        parse_table(table, Path("pyproject.toml"))
