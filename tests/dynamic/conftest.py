"""The session fixture that runs the dynamic-mode scenarios the selected tests declare
(helpers live in dynhelp.py)."""

from __future__ import annotations

import pytest

from dynhelp import OPTIONAL, SCENARIOS, Runs


@pytest.fixture(scope="session")
def runs(selected_scenarios):
    runs = Runs(name for name in (*SCENARIOS, *OPTIONAL) if name in selected_scenarios)
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)
