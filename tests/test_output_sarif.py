"""`--format sarif`: the SARIF 2.1.0 structure GitHub code scanning reads, checked field by
field."""

from __future__ import annotations

import json
from urllib.parse import urlparse

from tests.cli_helpers import run_cli, write_project

SOURCE = '''\
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * 2


def forward(x):
    a = checkpoint(block, x)
    b = checkpoint(block, x, use_reentrant=False, determinism_check="none")
    return a, b
'''

LEVELS = {"none", "note", "warning", "error"}


def sarif_for(tmp_path, *files):
    root = write_project(tmp_path, dict(files))
    result = run_cli(*(name for name, _ in files), "--format", "sarif", cwd=root)
    return result, json.loads(result.stdout)


def check_structure(log: dict) -> None:
    """The parts of the SARIF 2.1.0 schema a producer must get right."""
    assert log["version"] == "2.1.0"
    assert log["$schema"].startswith("https://") and "sarif-2.1.0" in log["$schema"]
    assert len(log["runs"]) == 1
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ckptlint"
    assert isinstance(driver["version"], str)
    rules = driver["rules"]
    ids = [rule["id"] for rule in rules]
    assert len(ids) == len(set(ids))
    for rule in rules:
        assert rule["name"] and rule["shortDescription"]["text"]
        assert urlparse(rule["helpUri"]).scheme in ("https", "http", "file")
        assert rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] in LEVELS
    for result in run["results"]:
        assert result["ruleId"] in ids
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in LEVELS
        assert result["message"]["text"]
        assert isinstance(result["properties"]["data"], dict)  # the finding's facts
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"]
        region = physical["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
        assert (region["endLine"], region["endColumn"]) >= (region["startLine"],
                                                           region["startColumn"])


def test_sarif_log(tmp_path):
    result, log = sarif_for(tmp_path, ("src/model.py", SOURCE))
    assert result.returncode == 1
    check_structure(log)
    run = log["runs"][0]
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    # Every reported rule, and only those.
    assert set(rules) == {"CKP102", "CKP105"}
    assert rules["CKP102"]["name"] == "implicit-use-reentrant"
    first = run["results"][0]
    assert first["ruleId"] == "CKP102"
    assert first["level"] == "warning"
    region = first["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (9, 9)  # 1-based
    assert first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/model.py"
    assert run["results"][1]["level"] == "note"  # CKP105 is info


def test_sarif_help_comes_from_the_rule_page(tmp_path):
    _, log = sarif_for(tmp_path,
                       ("m.py", "from torch.utils.checkpoint import checkpoint\ndef f(:\n"))
    (rule,) = log["runs"][0]["tool"]["driver"]["rules"]
    assert rule["id"] == "CKP999"
    assert rule["help"]["markdown"].startswith("# CKP999: parse-error")
    assert rule["helpUri"].endswith("CKP999-parse-error.md")
    assert log["runs"][0]["results"][0]["level"] == "error"


def test_sarif_without_findings_is_a_valid_empty_run(tmp_path):
    result, log = sarif_for(tmp_path, ("clean.py", "x = 1\n"))
    assert result.returncode == 0
    check_structure(log)
    assert log["runs"][0]["results"] == []
    assert log["runs"][0]["tool"]["driver"]["rules"] == []


SEGMENT = '''\
from torch.utils.checkpoint import checkpoint

calls = []


def block(x):
    calls.append(1)
    return x * 2


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
'''


def test_segment_finding_links_its_checkpoint_site(tmp_path):
    _, log = sarif_for(tmp_path, ("seg.py", SEGMENT))
    check_structure(log)
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "CKP401"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 7
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["region"]["startLine"] == 12
    assert "checkpointed at seg.py:12" in result["message"]["text"]
