"""The transformers versions a project runs: configured, declared by the project, installed,
or unknown; what CKP104 reports and fixes for each, and `--show-settings`."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from ckptlint import versions
from tests.cli_helpers import run_cli

ENABLE = '''\
from transformers import AutoModel

model = AutoModel.from_pretrained("gpt2")
model.gradient_checkpointing_enable()
'''


def project(root: Path, files: dict[str, str], table: str = "") -> Path:
    """A project with `[tool.ckptlint]` (so no outer config leaks in) and no version set,
    unless `table` sets one; `files` may hold pyproject.toml's other tables."""
    root.mkdir(parents=True, exist_ok=True)
    pyproject = files.pop("pyproject.toml", "")
    (root / "pyproject.toml").write_text(f"{pyproject}\n[tool.ckptlint]\n{table}",
                                         encoding="utf-8")
    for name, content in {"train.py": ENABLE, **files}.items():
        (root / name).write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def transformers_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment without transformers, as a pre-commit hook's usually is (the test
    extra installs it for dynamic mode's tests on real models)."""
    monkeypatch.setattr(versions, "installed_version", functools.lru_cache(lambda package: None))


def ckp104(root: Path) -> list[dict]:
    result = run_cli("train.py", "--format", "json", "--no-cache", cwd=root)
    assert result.returncode in (0, 1), result.stderr
    return [f for f in json.loads(result.stdout) if f["code"] == "CKP104"]


@pytest.mark.parametrize(("files", "versions", "fixable"), [
    ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["transformers>=4.40,<5"]\n'},
     ">=4.40,<5", True),
    ({"pyproject.toml": '[project]\nname = "p"\n[project.optional-dependencies]\n'
                        'hf = ["transformers[torch] ~= 4.38"]\n'}, "~=4.38", True),
    ({"requirements.txt": "# pinned\n-r base.txt\ntorch\ntransformers\n"}, "any version", False),
    ({"setup.py": 'from setuptools import setup\nsetup(name="p", '
                  'install_requires=["transformers>=4.30"])\n'}, ">=4.30", False),
    ({"setup.cfg": "[options]\ninstall_requires =\n    transformers==4.46.0\n"}, "==4.46.0", True),
    # The union of what the project declares: one file admitting 4.x is enough.
    ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["transformers>=5.1"]\n',
      "requirements-dev.txt": "transformers==4.46.0 ; python_version >= '3.9'\n"},
     ">=5.1 || ==4.46.0", True),
])
def test_a_declared_range_admitting_4x_is_reported(tmp_path, files, versions, fixable):
    [finding] = ckp104(project(tmp_path, files))
    assert finding["data"]["version_source"] == "declared"
    assert finding["data"]["versions"] == versions
    assert f"declares ({versions}) include releases before 5.0" in finding["message"]
    # The fix needs `gradient_checkpointing_kwargs`, which exists from 4.35 only.
    assert (finding["fix"] is not None) == fixable


@pytest.mark.parametrize("declaration", ['["transformers>=5.0"]', '["transformers>5.2,<6"]',
                                         '["transformers==5.24.*"]'])
def test_a_declared_range_from_5_is_not_reported(tmp_path, declaration):
    pyproject = f'[project]\nname = "p"\ndependencies = {declaration}\n'
    assert ckp104(project(tmp_path, {"pyproject.toml": pyproject})) == []


def test_the_configuration_wins_over_the_declared_range(tmp_path):
    files = {"requirements.txt": "transformers<5\n"}
    newer = 'versions = {transformers = "5.2.0"}\n'
    assert ckp104(project(tmp_path / "a", dict(files), newer)) == []
    [finding] = ckp104(project(tmp_path / "b", dict(files), 'transformers-version = "4.46.0"\n'))
    assert finding["data"]["version_source"] == "config"
    assert finding["data"]["versions"] == "==4.46.0"
    assert "transformers 4.46.0 checkpoints in reentrant mode" in finding["message"]


def test_an_unknown_version_is_reported_without_a_fix(tmp_path, transformers_not_installed):
    # Nothing declared, and transformers not installed.
    [finding] = ckp104(project(tmp_path, {}))
    assert finding["data"]["version_source"] == "unknown"
    assert finding["data"]["versions"] == "unknown"
    assert "which one runs is unknown" in finding["message"]
    assert "versions = {transformers" in finding["message"]
    assert finding["fix"] is None


def test_a_changed_declaration_is_not_answered_from_the_cache(tmp_path):
    root = project(tmp_path, {"requirements.txt": "transformers>=5\n"},
                   'cache-dir = "cache"\n')
    assert run_cli("train.py", cwd=root).returncode == 0
    (root / "requirements.txt").write_text("transformers>=4.40\n")
    result = run_cli("train.py", cwd=root)
    assert result.returncode == 1 and "CKP104" in result.stdout


@pytest.mark.parametrize(("table", "message"), [
    ('versions = {transformers = "latest"}', "key `versions.transformers`: expected a version"),
    ('versions = "4.46.0"', "key `versions`: expected a table"),
    ('versions = {transformers = "4.46.0"}\ntransformers-version = "4.40.0"',
     "key `transformers-version`: '4.40.0' differs from `versions.transformers`"),
])
def test_bad_versions_are_one_line_and_exit_2(tmp_path, table, message):
    root = project(tmp_path, {}, table + "\n")
    result = run_cli("train.py", cwd=root)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"ckptlint: error: {root / 'pyproject.toml'}: {message}")


def test_show_settings_names_each_setting_and_where_the_versions_come_from(tmp_path):
    pyproject = '[project]\nname = "p"\ndependencies = ["transformers>=4.40,<5"]\n'
    root = project(tmp_path, {"pyproject.toml": pyproject,
                              "requirements.txt": "transformers==4.46.0\n"},
                   'ignore = ["CKP105"]\n')
    result = run_cli("--show-settings", cwd=root)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"config file: {root / 'pyproject.toml'}" in lines
    assert "ignore: CKP105" in lines
    assert "CKP105" not in next(line for line in lines if line.startswith("enabled codes:"))
    assert ("versions in force: transformers >=4.40,<5 || ==4.46.0 "
            "(declared: pyproject.toml, requirements.txt)") in lines
    configured = run_cli("--show-settings", "--config", str(root / "pyproject.toml"), cwd=root)
    assert "versions in force: transformers >=4.40,<5" in configured.stdout
    (root / "pyproject.toml").write_text('[tool.ckptlint]\nversions = {transformers = "4.46.0"}\n')
    shown = run_cli("--show-settings", cwd=root).stdout.splitlines()
    assert f"versions in force: transformers ==4.46.0 (config: {root / 'pyproject.toml'})" \
        in shown
    assert "versions: transformers = 4.46.0" in shown


def test_setup_py_is_read_never_run(tmp_path, transformers_not_installed):
    setup = ('import pathlib\npathlib.Path("ran").write_text("yes")\n'
             'from setuptools import setup\nREQS = ["transformers>=5"]\n'
             'setup(name="p", install_requires=["transformers>=4.40"] + REQS)\n')
    # A computed list is not followed: only literal lists count, so nothing is declared here.
    root = project(tmp_path, {"setup.py": setup})
    [finding] = ckp104(root)
    assert finding["data"]["version_source"] == "unknown"
    assert not (root / "ran").exists()


TRL_TRAINING = '''\
from trl import SFTConfig

args = SFTConfig(output_dir="out"{switch})
'''


@pytest.mark.parametrize(("trl", "switch", "reported"), [
    # Before 0.27 trl's trainers keep transformers' default; from 0.27 they set it to False.
    ('trl = "0.26.2"', ", gradient_checkpointing=True", True),
    ('trl = "0.27.0"', ", gradient_checkpointing=True", False),
    ('trl = "1.16.0"', ", gradient_checkpointing=True", False),
    # Not passed: on by default from 0.22 only.
    ('trl = "0.24.0"', "", True),
    ('trl = "0.21.0"', "", False),
    ('trl = "0.21.0"', ", gradient_checkpointing=True", True),
    ('trl = "0.26.2"', ", gradient_checkpointing=False", False),
])
def test_trl_configurations_follow_each_trl_release(tmp_path, trl, switch, reported):
    root = project(tmp_path, {"train.py": TRL_TRAINING.format(switch=switch)},
                   f'versions = {{transformers = "4.46.0", {trl}}}\n')
    findings = ckp104(root)
    assert bool(findings) == reported
    if reported:
        [finding] = findings
        assert finding["data"]["library"] == "trl"
        assert finding["data"]["trl_versions"] == "==" + trl.split('"')[1]
        assert "in trl's `SFTConfig`" in finding["message"]
        assert "releases before 0.27 keep transformers' default" in finding["message"]


@pytest.mark.parametrize(("linted", "reported"), [
    ('[project]\nname = "a"\ndependencies = ["transformers>=5"]\n', False),
    (None, True),  # no project file: unknown, never the current directory's range
])
def test_declared_versions_come_from_the_linted_files_project_not_the_current_directory(
        tmp_path, transformers_not_installed, linted, reported):
    """Without a `[tool.ckptlint]` table anywhere, the project whose dependencies count is
    the linted file's (the nearest folder above it with a project file), not the folder
    ckptlint runs in."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "pyproject.toml").write_text(
        '[project]\nname = "here"\ndependencies = ["transformers>=4.40,<5"]\n')
    other = tmp_path / "other" / "pkg"
    other.mkdir(parents=True)
    if linted is not None:
        (other.parent / "pyproject.toml").write_text(linted)
    (other / "train.py").write_text(ENABLE)
    result = run_cli("../other/pkg/train.py", "--format", "json", "--no-cache", cwd=here)
    findings = [f for f in json.loads(result.stdout) if f["code"] == "CKP104"]
    assert bool(findings) == reported
    if reported:
        assert findings[0]["data"]["version_source"] == "unknown"


def test_trl_configurations_say_nothing_when_the_trl_release_is_unknown(
        tmp_path, transformers_not_installed):
    """trl's releases disagree (from 0.27 they set `use_reentrant=False`): with no trl
    declared, configured or installed, CKP104 stays silent about its configurations, while
    transformers' own enabling call in the same project is still reported."""
    switched_on = TRL_TRAINING.format(switch=", gradient_checkpointing=True")
    root = project(tmp_path, {"train.py": switched_on, "model.py": ENABLE},
                   'versions = {transformers = "4.46.0"}\n')
    assert ckp104(root) == []
    result = run_cli("model.py", "--format", "json", "--no-cache", cwd=root)
    assert [f["code"] for f in json.loads(result.stdout)] == ["CKP104"]


@pytest.mark.parametrize(("declared", "reported"), [
    ('["trl>=0.20", "transformers>=4.40,<5"]', True),
    ('["trl>=0.27", "transformers>=4.40,<5"]', False),
    ('["trl<0.22", "transformers>=4.40,<5"]', False),  # off by default in every release
    ('["trl>=0.20", "transformers>=5"]', False),  # transformers 5 is non-reentrant
])
def test_trl_configurations_follow_the_declared_trl_range(tmp_path, declared, reported):
    pyproject = f'[project]\nname = "p"\ndependencies = {declared}\n'
    root = project(tmp_path, {"pyproject.toml": pyproject,
                              "train.py": TRL_TRAINING.format(switch="")})
    assert bool(ckp104(root)) == reported
    settings = run_cli("--show-settings", "train.py", cwd=root)
    trl = declared.split('"')[1].removeprefix("trl")
    assert f"versions in force: trl {trl} (declared: pyproject.toml)" in settings.stdout


@pytest.mark.parametrize(("spec", "low", "high", "admitted"), [
    (">=0.20", (0, 22), (0, 27), True),
    ("<0.22", (0, 22), (0, 27), False),
    ("<=0.22", (0, 22), (0, 27), True),
    ("==0.27.0", (), (0, 27), False),
    ("==0.26.2", (0, 22), (0, 27), True),
    (">=0.27,<1", (), (0, 27), False),
    ("", (0, 22), (0, 27), True),
])
def test_a_range_admits_a_window_of_releases(spec, low, high, admitted):
    declared = versions.Versions((spec,), versions.Source.DECLARED)
    assert declared.admits_between(low, high) == admitted


def test_a_changed_trl_declaration_is_not_answered_from_the_cache(tmp_path):
    root = project(tmp_path, {"requirements.txt": "transformers<5\ntrl>=0.27\n",
                              "train.py": TRL_TRAINING.format(switch="")},
                   'cache-dir = "cache"\n')
    assert run_cli("train.py", cwd=root).returncode == 0
    (root / "requirements.txt").write_text("transformers<5\ntrl>=0.24\n")
    result = run_cli("train.py", cwd=root)
    assert result.returncode == 1 and "CKP104" in result.stdout
