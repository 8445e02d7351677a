"""The training setup read statically (ckptlint/analysis/setup.py) and what CKP601, CKP101,
CKP102 and CKP104 make of it, through the command line on real project trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli, write_project

PEFT_MODEL = ("from peft import LoraConfig, get_peft_model\n"
              "from transformers import AutoModelForCausalLM, TrainingArguments\n"
              "model = get_peft_model(AutoModelForCausalLM.from_pretrained('m'), LoraConfig())\n")
NON_REENTRANT = ("from torch.utils.checkpoint import checkpoint\n"
                 "def forward(block, x):\n"
                 "    return checkpoint(block, x, use_reentrant=False)\n")
ZERO3 = json.dumps({"zero_optimization": {"stage": 3}})
ZERO2 = json.dumps({"zero_optimization": {"stage": 2}})


def findings(root: Path, *paths: str, config: str | None = None) -> list[dict]:
    result = run_cli("--format", "json", "--no-cache", *(paths or (".",)), cwd=root)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def codes(found: list[dict]) -> list[tuple[str, str, int]]:
    return sorted((Path(f["filename"]).name, f["code"], f["location"]["row"]) for f in found)


def settings(root: Path, *paths: str) -> str:
    result = run_cli("--show-settings", *paths, cwd=root)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_zero3_fixture_project_fixes_toward_reentrant_mode_with_the_reason():
    root = Path(__file__).parent / "fixtures" / "projects" / "setup_zero3_peft"
    found = findings(root)
    ckp102 = next(f for f in found if f["code"] == "CKP102")
    assert ckp102["fix"]["edits"][0]["content"] == ", use_reentrant=True"
    assert "ZeRO-3 with frozen parameters" in ckp102["fix"]["message"]
    ckp601 = [f for f in found if f["code"] == "CKP601"]
    assert {f["data"]["setup"]["zero_stage_from"] for f in ckp601} == {"ds_zero3.json"}
    assert [f["location"]["column"] for f in ckp601] == [38, 36]  # the deciding expressions
    assert not [f for f in found if f["code"] == "CKP101"]  # use_reentrant=True: required


def test_ckp104_keeps_reentrant_mode_under_zero3_with_adapters(tmp_path):
    source = PEFT_MODEL + "model.gradient_checkpointing_enable()\n"
    with_zero3 = write_project(tmp_path / "zero3", {"train.py": source, "ds.json": ZERO3})
    [finding] = findings(with_zero3)
    assert finding["code"] == "CKP104" and finding["data"]["advice"] == "reentrant"
    assert finding["fix"]["edits"][0]["content"].endswith(
        'gradient_checkpointing_kwargs={"use_reentrant": True}')
    assert "use_reentrant\": True}` to keep it" in finding["message"]
    plain = write_project(tmp_path / "plain", {"train.py": source})
    [finding] = findings(plain)
    assert finding["data"]["advice"] == "non-reentrant"
    assert finding["fix"]["edits"][0]["content"].endswith('{"use_reentrant": False}')


def test_transformers_5_default_is_non_reentrant_under_zero3(tmp_path):
    source = PEFT_MODEL + "model.gradient_checkpointing_enable()\n"
    root = write_project(tmp_path, {"train.py": source, "ds.json": ZERO3},
                         'versions = {transformers = "5.2.0"}\n')
    assert codes(findings(root)) == [("train.py", "CKP601", 4)]


def test_an_accelerate_config_at_its_default_place_and_the_file_it_names(tmp_path):
    source = PEFT_MODEL + ("model.gradient_checkpointing_enable("
                           "gradient_checkpointing_kwargs={'use_reentrant': False})\n")
    inline = write_project(tmp_path / "inline", {
        "train.py": source,
        "accelerate_config.yaml": "distributed_type: DEEPSPEED\n"
                                  "deepspeed_config:\n  zero_stage: 3\n"})
    assert codes(findings(inline)) == [("train.py", "CKP601", 4)]
    named = write_project(tmp_path / "named", {
        "train.py": source, "configs/zero3.json": ZERO3, "configs/zero2.json": ZERO2,
        "accelerate_config.yaml": "distributed_type: DEEPSPEED\n"
                                  "deepspeed_config:\n"
                                  "  deepspeed_config_file: configs/zero2.json\n"})
    assert codes(findings(named)) == []
    assert "zero-stage: 2 (configs/zero2.json)" in settings(named)


def test_an_accelerate_config_named_from_code(tmp_path):
    root = write_project(tmp_path, {
        "train.py": PEFT_MODEL + NON_REENTRANT + "LAUNCH = 'launch/zero3.yaml'\n",
        "launch/zero3.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"})
    assert codes(findings(root)) == [("train.py", "CKP601", 6)]


def test_several_deepspeed_configs_none_named_is_unknown(tmp_path):
    one = write_project(tmp_path / "one", {"train.py": PEFT_MODEL + NON_REENTRANT,
                                           "ds.json": ZERO3,
                                           "results/metrics.json": ZERO2})  # not named so
    assert codes(findings(one)) == [("train.py", "CKP601", 6)]
    assert "the only DeepSpeed config" in settings(one)
    several = write_project(tmp_path / "several", {"train.py": PEFT_MODEL + NON_REENTRANT,
                                                   "ds3.json": ZERO3, "ds2.json": ZERO2})
    assert codes(findings(several)) == []
    assert "zero-stage: unknown (2 DeepSpeed configs, none named by the code)" \
        in settings(several)
    named = write_project(tmp_path / "named", {
        "train.py": PEFT_MODEL + NON_REENTRANT
        + "args = TrainingArguments(output_dir='o', deepspeed='ds3.json')\n",
        "ds3.json": ZERO3, "ds2.json": ZERO2})
    assert codes(findings(named)) == [("train.py", "CKP601", 6)]


def test_a_file_passed_alone_resolves_the_config_it_names(tmp_path):
    """pre-commit passes only the changed file: a script outside any package still finds
    the config it names, relative to the project root or to itself."""
    script = PEFT_MODEL + NON_REENTRANT + \
        "args = TrainingArguments(output_dir='o', deepspeed='configs/zero3.json')\n"
    root = write_project(tmp_path, {"scripts/train.py": script, "configs/zero3.json": ZERO3,
                                    "configs/zero2.json": ZERO2})
    assert codes(findings(root, "scripts/train.py")) == [("train.py", "CKP601", 6)]
    assert "zero-stage: 3 (configs/zero3.json)" in settings(root, "scripts/train.py")
    beside = write_project(tmp_path / "beside", {
        "scripts/train.py": script.replace("configs/zero3.json", "zero3.json"),
        "scripts/zero3.json": ZERO3, "other.json": ZERO2})
    assert codes(findings(beside, "scripts/train.py")) == [("train.py", "CKP601", 6)]


def test_configs_outside_the_project_are_never_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ds.json").write_text(ZERO3)
    script = PEFT_MODEL + NON_REENTRANT + \
        "args = TrainingArguments(output_dir='o', deepspeed='{}')\n"
    up = write_project(tmp_path / "up", {"train.py": script.format("../outside/ds.json")})
    absolute = write_project(tmp_path / "abs", {
        "train.py": script.format(outside / "ds.json")})
    linked = write_project(tmp_path / "linked", {"train.py": script.format("ds.json")})
    os.symlink(outside / "ds.json", linked / "ds.json")
    for root in (up, absolute, linked):
        assert codes(findings(root)) == [], root
        assert "zero-stage: unknown" in settings(root)


def test_bad_configs_are_skipped_without_a_traceback(tmp_path):
    marker = tmp_path / "ran"
    root = write_project(tmp_path / "p", {
        "train.py": PEFT_MODEL + NON_REENTRANT
        + "A = 'evil.yaml'\nB = 'big.yaml'\nC = 'broken.yaml'\n",
        "evil.yaml": f"!!python/object/apply:os.system ['touch {marker}']\n",
        "big.yaml": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
                    + "#" * (1024 * 1024) + "\n",
        "broken.yaml": "distributed_type: [DEEPSPEED\n",
        "ds.json": "{not json"})
    assert codes(findings(root)) == []
    assert not marker.exists()
    assert "zero-stage: -" in settings(root)


@pytest.mark.parametrize("trl, config, reported", [
    ("1.10.0", "SFTConfig", False), ("0.28.0", "SFTConfig", False),
    ("0.27.2", "SFTConfig", True), ("1.5.0", "DPOConfig", True), ("1.9.0", "DPOConfig", False)])
def test_trl_releases_that_force_reentrant_mode_protect_their_trainers(tmp_path, trl, config,
                                                                       reported):
    source = PEFT_MODEL + (f"from trl import {config}\n"
                           f"args = {config}(output_dir='o', deepspeed='ds.json', "
                           "gradient_checkpointing_kwargs={'use_reentrant': False})\n")
    root = write_project(tmp_path, {"train.py": source, "ds.json": ZERO3},
                         f'versions = {{transformers = "4.46.0", trl = "{trl}"}}\n')
    assert codes(findings(root)) == ([("train.py", "CKP601", 5)] if reported else [])


DDP_MODEL = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel\n"
             "from torch.utils.checkpoint import checkpoint\n"
             "def forward(block, x):\n"
             "    return checkpoint(block, x, use_reentrant=True)\n")


@pytest.mark.parametrize("setup, reported", [
    ("DistributedDataParallel(m, find_unused_parameters=True)", True),
    ("DistributedDataParallel(m, find_unused_parameters=True, static_graph=True)", False),
    ("DistributedDataParallel(m, find_unused_parameters=False)", False),
    ("DistributedDataParallel(m, find_unused_parameters=flag)", False),
    ("TrainingArguments(output_dir='o', ddp_find_unused_parameters=True)", True),
    ("Trainer(strategy='ddp_find_unused_parameters_true')", True),
    ("DistributedDataParallel(m, find_unused_parameters=True)\n"
     "DistributedDataParallel(m, find_unused_parameters=False)", False),
])
def test_ddp_find_unused_parameters_with_reentrant_checkpoints(tmp_path, setup, reported):
    root = write_project(tmp_path, {"model.py": DDP_MODEL,
                                    "train.py": "from model import forward\n" + setup + "\n"})
    expected = [("model.py", "CKP101", 5)] + ([("model.py", "CKP601", 5)] if reported else [])
    assert codes(findings(root)) == expected


def test_a_fact_holds_for_the_modules_its_file_imports(tmp_path):
    """Through a package and a relative import; a script that does not import the model
    does not set its setup."""
    ddp = "DistributedDataParallel(m, find_unused_parameters=True)\n"
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/nets/__init__.py": "",
        "pkg/nets/model.py": DDP_MODEL, "pkg/nets/wrap.py": "from .model import forward\n",
        "pkg/train.py": "from pkg.nets import wrap\n" + ddp,
        "other.py": ddp, "solo.py": DDP_MODEL})
    found = codes(findings(root))
    assert ("model.py", "CKP601", 5) in found
    assert ("solo.py", "CKP601", 5) not in found and ("solo.py", "CKP101", 5) in found


def test_a_model_file_passed_alone_gets_the_setup_of_the_script_that_imports_it(tmp_path):
    """pre-commit passes only the changed model file; the training script lives in
    `scripts/`, outside any package."""
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/model.py": DDP_MODEL,
        "scripts/train.py": "from pkg.model import forward\n"
                            "DistributedDataParallel(m, find_unused_parameters=True)\n"})
    assert codes(findings(root, "pkg/model.py")) == [("model.py", "CKP101", 5),
                                                      ("model.py", "CKP601", 5)]


def test_the_ddp_fixture_reports_the_keyword():
    root = Path(__file__).parent / "fixtures" / "projects" / "setup_ddp_unused"
    [ckp601] = [f for f in findings(root) if f["code"] == "CKP601"]
    assert ckp601["data"]["pairing"] == "ddp-find-unused-reentrant"
    assert ckp601["data"]["setup"] == {"find_unused_parameters": True,
                                       "find_unused_parameters_from": "train.py:6"}
    assert "Expected to mark a variable ready only once" in ckp601["message"]


def test_show_settings_prints_the_setup(tmp_path):
    root = write_project(tmp_path, {
        "train.py": "import torch\nfrom torch.distributed.fsdp import fully_shard, "
                    "MixedPrecisionPolicy\n"
                    "fully_shard(m, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))\n"
                    "trainer = Trainer(strategy='deepspeed_stage_3')\n"})
    shown = settings(root)
    assert "training setup (CKP601):" in shown
    assert "  fsdp: True (train.py:3)" in shown
    assert "  fsdp-mixed-precision: MixedPrecisionPolicy(param_dtype=torch.bfloat16) " \
           "(train.py:3)" in shown
    assert "  zero-stage: 3 (train.py:4)" in shown
    assert "  lightning-strategy: deepspeed_stage_3 (train.py:4)" in shown


@pytest.mark.parametrize("statement, reported", [
    ("import deepspeed\ndeepspeed.initialize(model=m, config={'zero_optimization': "
     "{'stage': 3}})", True),
    ("import deepspeed\nCFG = {'zero_optimization': {'stage': 3}}\n"
     "deepspeed.initialize(model=m, config_params=CFG)", True),
    ("DeepSpeedStrategy(stage=3)", True),
    ("DeepSpeedStrategy()", False),  # stage 2 by default
    ("DeepSpeedPlugin(zero_stage=3)", True),
    ("Trainer(strategy='deepspeed_stage_3_offload')", True),
    ("TrainingArguments(output_dir='o', deepspeed={'zero_optimization': {'stage': 'auto'}})",
     False),
    ("TrainingArguments(output_dir='o', deepspeed=args.deepspeed)", False),
])
def test_each_way_of_stating_the_zero_stage(tmp_path, statement, reported):
    root = write_project(tmp_path, {"train.py": PEFT_MODEL + NON_REENTRANT + statement + "\n"})
    assert codes(findings(root)) == ([("train.py", "CKP601", 6)] if reported else [])


def test_explain_names_the_ckp601_sites_of_a_project():
    """`ckptlint explain --sites`: DDP's error (a real log) and ZeRO-3's `[0]` shapes point at
    the CKP601 sites of the fixture projects."""
    logs = Path(__file__).parent / "explain_logs"
    projects = Path(__file__).parent / "fixtures" / "projects"
    for log, project, row in ((logs / "real" / "ddp_find_unused.log", "setup_ddp_unused", 13),
                              (logs / "handwritten" / "zero3_peft.log", "setup_zero3_peft", 14)):
        result = run_cli("explain", "--format", "json", "--sites", str(projects / project),
                         str(log), cwd=projects)
        sites = [(site["code"], site["row"]) for error in json.loads(result.stdout)
                 for signature in error["signatures"] for site in signature.get("sites", [])]
        assert ("CKP601", row) in sites, (log.name, sites)


def test_a_deepspeed_config_added_at_its_default_place_is_seen_through_the_cache(tmp_path):
    """The result cache is not stale when a config appears where the setup looks for one:
    linting with the cache, then adding `ds_zero3.json`, reports what a cold run reports."""
    root = write_project(tmp_path, {"train.py": PEFT_MODEL + NON_REENTRANT})
    def lint() -> list[dict]:
        result = run_cli("--format", "json", ".", cwd=root,
                         env={"CKPTLINT_CACHE_DIR": str(tmp_path / "cache")})
        assert result.returncode in (0, 1), result.stderr
        return json.loads(result.stdout)

    assert codes(lint()) == []
    (root / "ds_zero3.json").write_text(ZERO3)
    assert codes(lint()) == codes(findings(root)) == [("train.py", "CKP601", 6)]
    (root / "ds_zero3.json").write_text(ZERO2)   # an edit of the config read
    assert codes(lint()) == []


def test_a_config_created_later_at_a_named_path_is_seen_through_the_cache(tmp_path):
    named = "args = TrainingArguments(output_dir='o', deepspeed='run/configs/zero.json')\n"
    root = write_project(tmp_path, {"train.py": PEFT_MODEL + NON_REENTRANT + named})

    def lint() -> list[tuple[str, str, int]]:
        result = run_cli("--format", "json", ".", cwd=root,
                         env={"CKPTLINT_CACHE_DIR": str(tmp_path / "cache")})
        assert result.returncode in (0, 1), result.stderr
        return codes(json.loads(result.stdout))

    assert lint() == []
    (root / "run" / "configs").mkdir(parents=True)   # deeper than the default places
    (root / "run" / "configs" / "zero.json").write_text(ZERO3)
    assert lint() == codes(findings(root)) == [("train.py", "CKP601", 6)]


def test_import_statements_are_read_without_parsing_the_whole_file():
    from ckptlint.analysis.setup import import_statements, imported_names

    text = ('"""Docstring.\nfrom the top, import what you need\n"""\n'
            "import os, pkg.a\n"
            "from pkg import (\n    b,\n    c)\n"
            "def f():\n    from .rel import d\n"
            "from pkg.e import \\\n    f\n")
    names = [name for statement in import_statements(text)
             for name in imported_names(statement, "pkg.mod", False)]
    assert names == ["os", "pkg.a", "pkg", "pkg.b", "pkg.c", "pkg.rel", "pkg.rel.d",
                     "pkg.e", "pkg.e.f"]


def test_an_edit_of_a_module_between_script_and_site_is_seen_through_the_cache(tmp_path):
    """The script's setup holds for the site through `pkg/wrapper.py`: the importers of the
    site file are found backwards, and an edit of that middle module (dropping, then
    restoring, its import of the model) changes the findings as a cold run does."""
    wrapper_imports = "from pkg.model import forward\n"
    root = write_project(tmp_path, {
        "pkg/__init__.py": "", "pkg/model.py": NON_REENTRANT, "pkg/wrapper.py": wrapper_imports,
        "scripts/train.py": PEFT_MODEL + "import pkg.wrapper\n", "ds_zero3.json": ZERO3})

    def lint(*paths: str) -> list[tuple[str, str, int]]:
        result = run_cli("--format", "json", *(paths or (".",)), cwd=root,
                         env={"CKPTLINT_CACHE_DIR": str(tmp_path / "cache")})
        assert result.returncode in (0, 1), result.stderr
        return codes(json.loads(result.stdout))

    reported = [("model.py", "CKP601", 3)]
    assert lint() == lint("pkg/model.py") == codes(findings(root)) == reported
    (root / "pkg" / "wrapper.py").write_text("import pkg\n")
    assert lint() == lint("pkg/model.py") == codes(findings(root)) == []
    (root / "pkg" / "wrapper.py").write_text(wrapper_imports)
    assert lint() == lint("pkg/model.py") == reported
