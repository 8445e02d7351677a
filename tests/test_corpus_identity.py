"""Findings on a fixed subset of a site-dense corpus (diffusers) stay what they were before the
summary store, and are byte-identical across `-j` values and with the store cold or warm.

The corpus is diffusers 0.42.1's source (`pip download --no-deps diffusers==0.42.1`, the
wheel unpacked): set `CKPTLINT_DIFFUSERS` to its `diffusers/` package folder. The whole
package is the project (the facts about other files come from all of it); the files linted
are the subset below. `tests/data/diffusers_subset.json` holds what ckptlint reported for them
before the rework (commit 11b76fd).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ckptlint.analysis.summary_store import FORMAT
from tests.cli_helpers import ckptlint_command

EXPECTED = Path(__file__).parent / "data" / "diffusers_subset.json"
SUBSET = [
    "diffusers/models/attention.py",
    "diffusers/models/autoencoders/autoencoder_kl_magvit.py",
    "diffusers/models/transformers/transformer_flux.py",
    "diffusers/models/unets/uvit_2d.py",
    "diffusers/pipelines/latent_diffusion/pipeline_latent_diffusion.py",
    "diffusers/models/transformers/transformer_2d.py",
    "diffusers/models/unets/unet_2d_blocks.py",
    "diffusers/models/autoencoders/autoencoder_kl_cogvideox.py",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus() -> Path:
    location = os.environ.get("CKPTLINT_DIFFUSERS")
    if not location or not (Path(location) / "__init__.py").is_file():
        pytest.skip("set CKPTLINT_DIFFUSERS to diffusers 0.42.1's package folder")
    return Path(location).resolve().parent


def report(corpus: Path, cache: Path | None, jobs: int) -> bytes:
    options = ["--no-cache"] if cache is None else []
    out = subprocess.run(
        [*ckptlint_command(), "check", "--format", "json", "-j", str(jobs), *options, *SUBSET],
        cwd=corpus, capture_output=True, timeout=1800,
        env={**os.environ, "CKPTLINT_CACHE_DIR": str(cache or corpus / "unused")})
    assert out.returncode in (0, 1), out.stderr.decode(errors="replace")[-2000:]
    return out.stdout


def test_findings_on_the_subset_are_unchanged_and_byte_identical(corpus: Path,
                                                                  tmp_path: Path) -> None:
    uncached = report(corpus, None, 1)
    assert json.loads(uncached) == json.loads(EXPECTED.read_text())
    assert report(corpus, None, 2) == uncached
    cache = tmp_path / "cache"
    assert report(corpus, cache, 2) == uncached  # cold store
    assert report(corpus, cache, 1) == uncached  # warm: results and store
    for run_file in cache.glob("run-*.json"):
        run_file.unlink()  # every file analysed again, from the warm store
    assert any((cache / f"summaries-{FORMAT}").glob("*.json"))
    assert report(corpus, cache, 1) == uncached
