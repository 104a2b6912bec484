"""The delayed designer samples: each environment's designer sample waits k steps for its reward, then trains.

    queue = DesignerQueue()
    queue.add(close_window(...))        # rewards computed when a window closes, due at a later step
    due = queue.pop(step)               # the designer samples that join step's training batch
    queue.restore(store, state, train)  # after a crash: the samples due at the next step

The reference flushes the samples whose reward falls due after the last step in one more batch (`pop(steps)`).
"""

from __future__ import annotations

from collections import defaultdict

import msgspec

from engine.feedback import DesignerReward
from engine.protocol.messages import Sample
from storage.records import RunState
from storage.store import Store, trajectory_key


class DesignerQueue:
    def __init__(self):
        self.due: dict[int, list[Sample]] = defaultdict(list)

    def add(self, rewards: list[DesignerReward]) -> None:
        for reward in rewards:
            if reward.sample is not None:
                self.due[reward.record.reward_step].append(reward.sample)

    def pop(self, step: int) -> list[Sample]:
        return self.due.pop(step, [])

    def waiting(self, step: int) -> bool:
        """Whether samples are due at `step`."""
        return bool(self.due.get(step))

    def restore(self, store: Store, state: RunState, train_designer: bool) -> None:
        """The samples due at the next step (state.steps_done): their window closed at the last committed step and
        they are in no batch yet. A reward due later was computed by a step that is not committed; that step is
        played again and recomputes it."""
        if not train_designer:
            return
        trained = {entry.trajectory_key for record in store.batches() for entry in record.entries}
        for reward in store.designer_rewards():
            key = trajectory_key(reward.env_step, reward.designer_sample_id)
            if reward.reward_step == state.steps_done and key not in trained:
                trajectory = store.trajectory(key)
                if trajectory is not None:
                    self.due[reward.reward_step].append(msgspec.structs.replace(trajectory.sample, reward=reward.raw_reward, advantage=reward.advantage))
