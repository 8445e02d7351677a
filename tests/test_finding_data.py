"""Findings carry their facts as `data`: every code's fields, the shipped JSON Schema, reading
them back, and messages rendered from them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ckptlint.checks import RULE_CLASSES
from ckptlint.finding_data import BOOL, Obj, OneOf
from ckptlint.findings import Finding
from ckptlint.messages import render
from ckptlint.registry import RULES
from ckptlint.rule_pages import code_blocks, section
from ckptlint.storage.plain_data import ShapeError
from tests.cli_helpers import REPO, run_cli
from tests.fixture_harness import check_fixture, fixture_targets
from tests.test_rule_pages import CODES_WITH_PAGES, NEEDS_A_RUN, findings_for, page

jsonschema = pytest.importorskip("jsonschema")

SCHEMA_FILE = REPO / "docs" / "schema" / "findings.schema.json"
FIXTURES = Path(__file__).parent / "fixtures"
STATE_CODES = {"CKP201", "CKP204", "CKP401"}


def validator():
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def rule_classes() -> list[type]:
    import importlib
    found = []
    for path in RULE_CLASSES:
        module, name = path.split(":")
        found.append(getattr(importlib.import_module(module), name))
    return found


def test_the_schema_in_the_repository_is_current():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "findings_schema.py"),
                             "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_fixtures_and_rule_page_examples_give_valid_json(tmp_path):
    """The JSON of every fixture and every rule page's Example validates against the shipped
    schema, and every state finding names its state."""
    findings = []
    for target in fixture_targets(FIXTURES):
        findings += check_fixture(target)[2]
    for code in CODES_WITH_PAGES:
        if code in NEEDS_A_RUN:
            continue
        for block in code_blocks(section(page(code), "Example")):
            findings += findings_for(code, block, tmp_path)
    output = json.loads(json.dumps([f.to_json() for f in findings]))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(output)]
    assert not errors, errors[:5]
    codes = {f["code"] for f in output}
    assert codes == set(RULES) - NEEDS_A_RUN, "some code's data is never checked here"
    for finding in output:
        if finding["code"] in STATE_CODES:
            assert finding["data"]["state"], finding


def test_the_printed_json_validates(tmp_path):
    result = run_cli("--format", "json", "--no-cache", str(REPO / "examples"), cwd=tmp_path)
    output = json.loads(result.stdout)
    assert output and {f["code"] for f in output} >= {"CKP201", "CKP401"}
    assert not list(validator().iter_errors(output))
    assert all("data" in f for f in output)


def test_phrases_word_every_value_a_field_may_take():
    """A field worded through `phrases` has a phrase for each value its shape allows."""
    for rule in rule_classes():
        shape = RULES[rule.code].data
        for name, phrases in rule.phrases.items():
            fields = {**shape.required, **shape.optional}
            if name not in fields:
                continue  # the phrases of a list's items (`each`)
            field = fields[name]
            if isinstance(field, OneOf):
                assert set(phrases) == set(field.values), (rule.code, name)
            elif field == BOOL:
                assert set(phrases) == {True, False}, (rule.code, name)


def test_templates_name_only_fields_of_their_code():
    """A template field missing from a finding's data would be a KeyError at lint time:
    every field a template names is one the code's data has."""
    from string import Formatter

    for rule in rule_classes():
        shape = RULES[rule.code].data
        known = {**shape.required, **shape.optional}
        for template in [rule.message, *(t for table in rule.phrases.values()
                                         for t in table.values())]:
            for _, name, _, _ in Formatter().parse(template):
                if name is None:
                    continue
                item_fields = set()
                for field in known.values():
                    item = getattr(field, "item", None)
                    if isinstance(item, Obj):
                        item_fields |= {*item.required, *item.optional}
                assert name in known or name in item_fields, (rule.code, name, template)


SETTINGS = """\
HISTORY = []
"""
MODEL = """\
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from pkg import settings
from pkg.settings import HISTORY

COUNT = 0


class Config:
    def __init__(self):
        global COUNT
        COUNT = 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = 1.0

    def set_gate(self, value):
        self.gate = value

    def forward(self, x):
        global COUNT
        y = x * COUNT
        COUNT += 1
        HISTORY.append(y)
        settings.HISTORY.append(y)
        if self.gate > 0:
            y = y * 2
        print(y)
        return y


def run(x):
    block = Block()
    return checkpoint(block, x, use_reentrant=False)


def train(block, batches):
    for x in batches:
        loss = run(x).sum()
        block.set_gate(0.5)
        loss.backward()
"""


def test_state_data_names_the_binding_and_the_phase_of_each_change(tmp_path):
    from ckptlint.config import parse_table
    from ckptlint.engine.run import lint

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "settings.py").write_text(SETTINGS)
    (tmp_path / "pkg" / "model.py").write_text(MODEL)

    def findings(table):
        config = parse_table(table, tmp_path / "pyproject.toml")
        return {(f.code, f.start.row): f.data
                for f in lint([str(tmp_path / "pkg")], config).findings}

    found = findings({})
    model = str(tmp_path / "pkg" / "model.py")

    def change(row, function, phase, how, because, via):
        return {"filename": model, "row": row, "function": function, "phase": phase,
                "how": how, "because": because, "via": via}

    in_segment = change(27, "Block.forward", "segment", "changed by augmented assignment",
                        "segment", "Block.forward")
    # `Config.__init__` rebinds COUNT too, but only in setup: not reported by default.
    assert found["CKP201", 26] == {
        "state": "COUNT", "owner": "pkg.model", "attribute": "COUNT", "changes": [in_segment]}
    # `set_gate` is a setter by its name, but `train` calls it between the forward and
    # `.backward()`: the call graph decides.
    assert found["CKP204", 30] == {
        "condition": "state", "state": "self.gate", "owner": "pkg.model.Block",
        "attribute": "gate",
        "changes": [change(22, "Block.set_gate", "step", "reassigned", "training", "train")]}
    for row, state in ((28, "HISTORY"), (29, "settings.HISTORY")):
        data = found["CKP401", row]
        assert (data["state"], data["owner"], data["attribute"], data["target"]) == \
            (state, "pkg.settings", "HISTORY", "module-state")
        assert data["changes"] == [change(row, "Block.forward", "segment", "mutated in place",
                                          "segment", "Block.forward")]
    assert found["CKP401", 27]["target"] == "global"
    printed = found["CKP401", 32]
    assert (printed["effect"], printed["state"], printed["owner"]) == ("output", "print",
                                                                      "builtins")
    # `state-changes = "any"` also names the changes made only in configuration.
    every = findings({"state-changes": "any"})
    assert every["CKP201", 26]["changes"] == [
        change(13, "Config.__init__", "configuration", "rebound", "setup", "Config.__init__"),
        in_segment]


@pytest.mark.parametrize("code", CODES_WITH_PAGES)
def test_rule_pages_document_the_data_fields(code):
    """A page's "Finding data" table lists exactly the fields of its code's data."""
    documented = re.findall(r"^\| `(\w+)` \|", section(page(code), "Finding data") or "", re.M)
    shape = RULES[code].data
    assert sorted(documented) == sorted([*shape.required, *shape.optional]), code


def finding_json(code: str, data) -> dict:
    return {"code": code, "message": "m", "filename": "a.py", "location": {"row": 1, "column": 1},
            "end_location": {"row": 1, "column": 2}, "site": None, "chain": [], "fix": None,
            "data": data, "target": None}


STATE = {"state": "SCALE", "owner": "train", "attribute": "SCALE",
         "changes": [{"filename": "train.py", "row": 3, "function": "step", "phase": "forward",
                      "how": "rebound"}]}


def test_data_is_read_back_field_by_field():
    assert Finding.from_json(finding_json("CKP201", STATE)).data == STATE
    extended = {**STATE, "added_later": [1, {"x": None}]}  # fields are added, never removed
    assert Finding.from_json(finding_json("CKP201", extended)).data == extended
    broken = [
        {key: value for key, value in STATE.items() if key != "state"},
        {**STATE, "state": 3},
        {**STATE, "changes": [{**STATE["changes"][0], "phase": "later"}]},
        {**STATE, "changes": [{**STATE["changes"][0], "row": 0}]},
        {**STATE, "x": float("nan")},
        [],
        None,
    ]
    for data in broken:
        with pytest.raises(ShapeError):
            Finding.from_json(finding_json("CKP201", data))
    without = finding_json("CKP201", STATE)
    del without["data"]
    with pytest.raises(ShapeError):
        Finding.from_json(without)


def test_a_findings_file_without_data_is_refused(tmp_path):
    """`ckptlint dynamic --findings` with findings from before `data` existed: one line, exit 2
    (judging them without their state would quietly weaken the verdicts)."""
    pytest.importorskip("torch")
    old = finding_json("CKP201", STATE)
    del old["data"]
    (tmp_path / "old.json").write_text(json.dumps([old]))
    result = run_cli("dynamic", "--findings", "old.json", "--", sys.executable, "-c", "pass",
                     cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and 'finding 1 has no "data"' in result.stderr


def test_message_formats():
    changes = [{"filename": "b.py", "row": 9, "function": None, "how": "deleted"},
               {"filename": "a.py", "row": 40, "function": "step", "how": "rebound"},
               {"filename": "a.py", "row": 7, "function": "Model.reset", "how": "rebound"}]
    assert render("{changes:places}", {"changes": changes}) == \
        "rebound at a.py:7 in `Model.reset` (and 2 other places)"
    assert render("{changes:places}", {"changes": changes[:1]}) == "deleted at b.py:9"
    assert render("`{api:last}` {names:ticks} ({codes:join}) {at:at} {{literal}}", {
        "api": "torch.utils.checkpoint.checkpoint", "names": ["a", "b"],
        "codes": ["CKP201", "CKP2"], "at": {"filename": "f.py", "row": 3}}) == \
        "`checkpoint` `a`, `b` (CKP201, CKP2) f.py:3 {literal}"
    assert render("{text:short}", {"text": "x  +\n y" + " z" * 40}) == \
        ("x + y" + " z" * 40)[:57] + "..."
    phrases = {"effect": {"write": "writes `{state}`"},
               "parts": {"one": "one {n}", "two": "two"}}
    assert render("{effect:phrase}; {parts:each}", {
        "effect": "write", "state": "S", "parts": [{"kind": "one", "n": 1}, {"kind": "two"}]},
        phrases) == "writes `S`; one 1; two"
    lacks = {"lacks": {"rng": "no RNG", "autocast": "no autocast", "unpassed-inputs": "no grads"}}
    assert render("{lacks:words}", {"lacks": ["rng"]}, lacks) == "no RNG"
    assert render("{lacks:words}", {"lacks": ["rng", "autocast"]}, lacks) == \
        "no RNG and no autocast"
    assert render("{lacks:words}", {"lacks": ["rng", "autocast", "unpassed-inputs"]}, lacks) == \
        "no RNG, no autocast and no grads"
    with pytest.raises(KeyError, match="missing"):
        render("{missing}", {})
