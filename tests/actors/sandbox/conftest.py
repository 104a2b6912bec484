"""Fixtures for the sandbox tests; the helpers themselves live in sandbox_helpers.py."""

from collections.abc import Iterator

import pytest

from tests.actors.sandbox.sandbox_helpers import PoolThread


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[PoolThread]:
    """One pool for the module, with short timeouts so that hanging cases stay cheap."""
    pool = PoolThread(workers=2, step_timeout_s=1.0, episode_timeout_s=20.0, memory_mb=256)
    yield pool
    pool.close()
