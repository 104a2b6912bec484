"""Re-validation, the worker's side (actors/revalidate.py): the validator on a design another worker claimed valid."""

from pathlib import Path

import trio

from actors.revalidate import revalidate
from actors.sandbox import open_sandbox_pool
from engine.protocol.config_loading import load_config
from engine.protocol.messages import ValidateTask

PICK = (Path(__file__).parents[1] / "e2e" / "data" / "pick_env.py").read_text()


def _task(code: str, author: str) -> ValidateTask:
    return ValidateTask(task_id="s0000-e00-a1-revalidate", env_id="s0000-e00-a1", skill="k", code=code, hint="one of two", author=author, step=0)


def test_another_worker_uses_its_pool_and_the_author_a_fresh_sandbox_process():
    config = load_config()

    async def main():
        async with open_sandbox_pool(workers=1) as pool:
            other = await revalidate(_task(PICK, "w0"), pool=pool, config=config, worker_id="w1")
            served = pool.statistics().episodes_served
            own = await revalidate(_task(PICK, "w1"), pool=pool, config=config, worker_id="w1")
            assert pool.statistics().episodes_served == served  # the author's check ran in a pool of its own
            broken = await revalidate(_task("class Broken:\n    pass\n", "w0"), pool=pool, config=config, worker_id="w1")
        return other, own, broken

    other, own, broken = trio.run(main)
    assert other.valid and other.sandbox == "other_worker" and other.env_id == "s0000-e00-a1"
    assert own.valid and own.sandbox == "fresh_process"
    assert not broken.valid and broken.reason
