"""Every test gets its own result cache in a temporary folder, never the checkout's
`.ckptlint_cache`: `CKPTLINT_CACHE_DIR` is set for the whole session (what session and module
fixtures start) and to a fresh folder for each test; subprocesses inherit it. A test of where
the cache goes by default sets the variable itself (empty or unset means "not set": the
configuration or the linted tree decides).
"""

from __future__ import annotations

import pytest

from ckptlint.engine.cache import CACHE_DIR_ENV


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(tmp_path_factory.mktemp("session-cache")))
        yield


@pytest.fixture(autouse=True)
def per_test_cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path_factory.mktemp("cache")))
