"""The session fixture that runs every dynamic-mode scenario (helpers live in dynhelp.py)."""

from __future__ import annotations

import pytest

from dynhelp import Runs


@pytest.fixture(scope="session")
def runs():
    runs = Runs()
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)
