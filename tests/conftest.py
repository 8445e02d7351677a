"""Fixtures for every test.

The result cache: each test gets its own in a temporary folder, never the checkout's
`.ckptlint_cache`: `CKPTLINT_CACHE_DIR` is set for the whole session (what session and module
fixtures start) and to a fresh folder for each test; subprocesses inherit it. A test of where
the cache goes by default sets the variable itself (empty or unset means "not set": the
configuration or the linted tree decides).

Watched-program scenarios (tests/dynamic, tests/profile): a test declares the ones it reads
with `@pytest.mark.scenarios(NAME, ...)`, and only those of the tests selected in this run
are started, so that one test, or the quick command, does not wait for all of them. Under
pytest-xdist with `--dist loadgroup`, the tests of one folder's scenarios share a worker, so
that each scenario runs once.
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


@pytest.fixture(scope="session")
def selected_scenarios(request) -> set[str]:
    """The scenario names declared by the tests selected in this run."""
    return {name for item in request.session.items
            for marker in item.iter_markers("scenarios") for name in marker.args}


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if item.get_closest_marker("scenarios"):
            item.add_marker(pytest.mark.xdist_group(f"scenarios in {item.path.parent.name}"))
