"""A peer's message budget: a burst, then the refill rate; a flood is refused, an honest pace never."""

from engine.peers import flood
from engine.peers.flood import MessageBudget


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_burst_is_taken_then_refused_until_the_refill():
    clock = _Clock()
    budget = MessageBudget(per_s=10.0, burst=100, clock=clock)
    assert all(budget.spend(b"p") for _ in range(100))
    assert not budget.spend(b"p")  # the 101st at once
    assert budget.spend(b"other")  # each peer has its own
    clock.now += 1.0  # 10 more
    assert sum(budget.spend(b"p") for _ in range(20)) == 10


def test_an_honest_pace_is_never_refused():
    clock = _Clock()
    budget = MessageBudget(per_s=10.0, burst=100, clock=clock)
    for _ in range(10_000):  # 9 messages a second for over 18 minutes
        clock.now += 1 / 9
        assert budget.spend(b"p")


def test_zero_rate_means_no_limit_and_memory_is_bounded(monkeypatch):
    unlimited = MessageBudget(per_s=0.0, burst=100)
    assert all(unlimited.spend(b"p") for _ in range(1000))
    monkeypatch.setattr(flood, "MAX_TRACKED", 50)
    budget = MessageBudget(per_s=1.0, burst=100)
    for i in range(500):
        budget.spend(f"id-{i}".encode())
    assert len(budget._buckets) == 50


def test_what_the_engine_asks_for_is_refunded():
    """Each task leased or chunk served gives its peer one message more: a fast fetch of a big model, a chunk
    request per chunk served, never runs out."""
    clock = _Clock()
    budget = MessageBudget(per_s=1.0, burst=100, clock=clock)
    for _ in range(100_000):  # all at one instant: only the refunds keep it within
        assert budget.spend(b"fetcher")
        budget.refund(b"fetcher")
    assert all(budget.spend(b"fetcher") for _ in range(100)) and not budget.spend(b"fetcher")  # a burst, no more
    budget.refund(b"stranger")  # nothing to refund: not tracked, and no credit in advance
    assert b"stranger" not in budget._buckets
