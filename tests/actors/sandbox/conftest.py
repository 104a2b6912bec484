"""Fixtures for the sandbox tests; the helpers themselves live in sandbox_helpers.py."""

from collections.abc import Iterator

import pytest

from tests.actors.sandbox.sandbox_helpers import ROOMY, TIGHT, PoolThread


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[PoolThread]:
    """One pool for the module whose limits are far from anything a valid environment does."""
    pool = PoolThread(**ROOMY)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def tight_pool() -> Iterator[PoolThread]:
    """One pool for the module with a short step timeout, for the cases that must time out."""
    pool = PoolThread(**TIGHT)
    yield pool
    pool.close()
