"""The command line as a user runs it. Most tests call it in this process (`run_cli`); those
about exit codes end to end, the entry points and what a fresh interpreter shows run the
installed console script in a subprocess (`run_cli_process`)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli_helpers import CKP102_SOURCE, REPO, run_cli, run_cli_process, write_project

CLEAN_SOURCE = CKP102_SOURCE.replace("checkpoint(block, x)",
                                     "checkpoint(block, x, use_reentrant=False)")


def test_findings_exit_1_and_flake8_style(tmp_path: Path) -> None:
    write_project(tmp_path, {"model.py": CKP102_SOURCE})
    result = run_cli_process("model.py", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith(
        "model.py:9:12: CKP102 `checkpoint` called without `use_reentrant`")


def test_clean_exit_0_and_check_subcommand(tmp_path: Path) -> None:
    write_project(tmp_path, {"model.py": CLEAN_SOURCE})
    for args in (("model.py",), ("check", "model.py"), ("check",), ()):
        result = run_cli(*args, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (0, ""), (args, result.stderr)
    assert run_cli_process("model.py", cwd=tmp_path).returncode == 0


def test_stubs_hold_no_sites(tmp_path: Path) -> None:
    """A `.pyi` stub never runs: the same code as a `.py` file is reported, as a stub not."""
    write_project(tmp_path, {"model.py": CKP102_SOURCE, "model_stub.pyi": CKP102_SOURCE})
    result = run_cli(".", cwd=tmp_path)
    assert result.returncode == 1
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["model.py"]


def test_exit_zero(tmp_path: Path) -> None:
    write_project(tmp_path, {"model.py": CKP102_SOURCE})
    result = run_cli("--exit-zero", "model.py", cwd=tmp_path)
    assert result.returncode == 0 and "CKP102" in result.stdout


def test_version_and_module_entry(tmp_path: Path) -> None:
    from ckptlint import __version__

    assert __version__ in run_cli_process("--version", cwd=tmp_path).stdout
    write_project(tmp_path, {"model.py": CKP102_SOURCE})
    result = subprocess.run([sys.executable, "-m", "ckptlint", "model.py"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 1 and "CKP102" in result.stdout


def test_json_contract(tmp_path: Path) -> None:
    write_project(tmp_path, {"model.py": CKP102_SOURCE})
    result = run_cli("--format", "json", "model.py", cwd=tmp_path)
    [finding] = json.loads(result.stdout)
    assert finding["code"] == "CKP102"
    assert finding["name"] == "implicit-use-reentrant"
    assert finding["severity"] == "warning"
    assert finding["filename"] == "model.py"
    assert finding["location"] == {"row": 9, "column": 12}
    assert finding["end_location"] == {"row": 9, "column": 32}
    assert finding["site"] == {"filename": "model.py", "row": 9, "column": 12}
    assert finding["chain"] == []
    assert finding["fix"]["applicability"] == "unsafe"
    assert finding["fix"]["edits"] == [{"content": ", use_reentrant=False",
                                        "location": {"row": 9, "column": 31},
                                        "end_location": {"row": 9, "column": 31}}]


def test_select_ignore_and_prefixes(tmp_path: Path) -> None:
    source = (CKP102_SOURCE
              + "\n\ndef other(x):\n    return checkpoint(block, x, use_reentrant=True)\n")
    write_project(tmp_path, {"model.py": source})

    def codes(*args: str) -> list[str]:
        out = run_cli("--format", "json", *args, "model.py", cwd=tmp_path).stdout
        return [f["code"] for f in json.loads(out)]

    assert codes() == ["CKP102", "CKP101"]
    assert codes("--select", "CKP101") == ["CKP101"]
    assert codes("--ignore", "CKP10") == []
    assert codes("--select", "CKP1", "--ignore", "CKP102") == ["CKP101"]
    assert codes("--ignore", "CKP1", "--extend-select", "CKP102") == ["CKP102"]
    assert codes("--select", "ckp101,CKP102") == ["CKP102", "CKP101"]


def test_unknown_selector_is_a_usage_error(tmp_path: Path) -> None:
    write_project(tmp_path, {"model.py": CKP102_SOURCE})
    result = run_cli_process("--select", "CKP777", "model.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown rule selector `CKP777`" in result.stderr


def test_missing_path_is_a_ckp999(tmp_path: Path) -> None:
    result = run_cli("nowhere.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "nowhere.py:1:1: CKP999 cannot read: No such file or directory" in result.stdout


def test_noqa_forms(tmp_path: Path) -> None:
    body = "from torch.utils.checkpoint import checkpoint\n\ndef f(x):\n    return x\n\n"
    lines = {
        "bare": "checkpoint(f, 1)  # noqa",
        "code": "checkpoint(f, 1)  # noqa: CKP102",
        "prefix": "checkpoint(f, 1)  # noqa: CKP1",
        "letters only": "checkpoint(f, 1)  # noqa: CKP",
        "other code": "checkpoint(f, 1)  # noqa: E501",
        "statement": "checkpoint(\n    f,\n    1,\n)  # noqa: CKP102",
    }
    for name, line in lines.items():
        write_project(tmp_path, {"model.py": body + line + "\n"})
        result = run_cli("model.py", cwd=tmp_path)
        expected = 1 if name == "other code" else 0
        assert result.returncode == expected, (name, result.stdout)
    write_project(tmp_path, {"model.py": "# ckptlint: noqa\n" + body + "checkpoint(f, 1)\n"})
    assert run_cli("model.py", cwd=tmp_path).returncode == 0


def test_config_discovery_and_keys(tmp_path: Path) -> None:
    write_project(tmp_path, {"pkg/model.py": CKP102_SOURCE}, config='ignore = ["CKP102"]\n')
    # A nearer pyproject.toml without [tool.ckptlint] is skipped.
    (tmp_path / "pkg" / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    assert run_cli("pkg/model.py", cwd=tmp_path).returncode == 0
    assert run_cli("model.py", cwd=tmp_path / "pkg").returncode == 0
    # The command line adds to the configured selection.
    assert run_cli("--extend-select", "CKP102", "pkg/model.py", cwd=tmp_path).returncode == 1


def test_per_file_ignores_and_excludes(tmp_path: Path) -> None:
    config = ('per-file-ignores = {"tests/*" = ["CKP1"]}\n'
              'extend-exclude = ["legacy/"]\n')
    write_project(tmp_path, {"tests/test_model.py": CKP102_SOURCE,
                             "legacy/old.py": CKP102_SOURCE,
                             "src/build/gen.py": CKP102_SOURCE,
                             "src/model.py": CKP102_SOURCE}, config=config)
    result = run_cli(".", cwd=tmp_path)
    assert result.returncode == 1
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["src/model.py"]


def test_bad_config_exit_2_naming_file_and_key(tmp_path: Path) -> None:
    for table, expected in (
        ("colour = 1\n", "unknown key `colour`"),
        ("select = \"CKP1\"\n", "key `select`: expected a list of rule codes or prefixes"),
        ("max-depth = -1\n", "key `max-depth`: expected a non-negative integer"),
        ('state-changes = "all"\n', "key `state-changes`: expected one of 'runtime', 'any'"),
        ('checkpoint-functions = {"a.b" = "sometimes"}\n', "key `checkpoint-functions.a.b`"),
        ("select = [\n", "invalid TOML"),
    ):
        write_project(tmp_path, {"model.py": CLEAN_SOURCE}, config=table)
        result = run_cli("model.py", cwd=tmp_path)
        assert result.returncode == 2, table
        assert "pyproject.toml" in result.stderr and expected in result.stderr, result.stderr


def test_git_ignored_files_skipped_unless_named(tmp_path: Path) -> None:
    write_project(tmp_path, {"generated/model.py": CKP102_SOURCE, "model.py": CLEAN_SOURCE})
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("generated/\n")
    assert run_cli(".", cwd=tmp_path).returncode == 0
    assert run_cli("generated/model.py", cwd=tmp_path).returncode == 1


def test_static_mode_never_imports_torch_or_runs_code(tmp_path: Path) -> None:
    marker = tmp_path / "executed.txt"
    source = (f"open({str(marker)!r}, 'w').write('ran')\n" + CKP102_SOURCE)
    write_project(tmp_path, {"model.py": source})
    probe = ("import sys, runpy\n"
             "sys.argv = ['ckptlint', 'model.py']\n"
             "try:\n    runpy.run_module('ckptlint', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('torch' in sys.modules, file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                            text=True)
    assert "CKP102" in result.stdout
    assert result.stderr.strip().endswith("False")
    assert not marker.exists()


def test_examples_exit_1(tmp_path: Path) -> None:
    result = run_cli("examples", cwd=REPO)
    assert result.returncode == 1
    assert "examples/train.py" in result.stdout
    assert "examples/clean_model.py" not in result.stdout


def test_try_except_import_reported_the_same_under_any_hash_seed(tmp_path: Path) -> None:
    source = ("try:\n    from deepspeed.checkpointing import checkpoint\n"
              "except ImportError:\n    from torch.utils.checkpoint import checkpoint\n\n"
              "def block(x):\n    return x\n\n\ndef forward(x):\n    return checkpoint(block, x)\n")
    write_project(tmp_path, {"model.py": source})
    outputs = {run_cli_process("model.py", cwd=tmp_path, env={"PYTHONHASHSEED": seed}).stdout
               for seed in ("0", "1", "2", "3")}
    assert len(outputs) == 1
    assert "CKP102" in outputs.pop()


def test_examples_json_matches_contract() -> None:
    result = run_cli("--format", "json", "examples", cwd=REPO)
    findings = json.loads(result.stdout)
    assert result.returncode == 1 and findings
    keys = {"code", "name", "message", "severity", "filename", "location", "end_location",
            "site", "chain", "fix"}
    for finding in findings:
        assert keys <= finding.keys()
        assert finding["severity"] in ("error", "warning", "info")
        assert finding["location"]["row"] >= 1 and finding["location"]["column"] >= 1
        if finding["code"].startswith(("CKP2", "CKP3", "CKP4")):
            assert finding["site"] is not None and finding["chain"]


def test_in_process_runs_match_the_console_script(tmp_path: Path) -> None:
    """What the other tests rely on: `run_cli` in this process gives what the console script
    gives (status, stdout, stderr), run after run (ckptlint's once-per-process notes too)."""
    write_project(tmp_path, {"model.py": CKP102_SOURCE}, config='cache-dir = "cache-link"\n')
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache-link").symlink_to(tmp_path / "cache")  # a note on stderr every run
    crlf = CKP102_SOURCE.replace("\n", "\r\n")
    for args, stdin in ((("model.py", "missing.py"), None),
                        (("-", "--stdin-filename", "m.py", "--fix", "--unsafe-fixes"), crlf),
                        (("--select", "CKP777", "model.py"), None)):
        env = {"CKPTLINT_CACHE_DIR": ""}  # the cache the project names
        process = run_cli_process(*args, cwd=tmp_path, input=stdin, env=env)
        for _ in range(2):
            in_process = run_cli(*args, cwd=tmp_path, input=stdin, env=env)
            assert ((in_process.returncode, in_process.stdout, in_process.stderr)
                    == (process.returncode, process.stdout, process.stderr)), args
    assert "symbolic link" in run_cli("model.py", cwd=tmp_path, env=env).stderr
