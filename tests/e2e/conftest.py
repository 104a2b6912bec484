"""Fixtures for the end-to-end tests."""

import pytest

from tests.e2e.helpers import Processes


@pytest.fixture
def processes():
    """The processes this test starts, all ended when it ends."""
    tracked = Processes()
    try:
        yield tracked
    finally:
        tracked.end_all()
