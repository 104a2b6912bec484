"""Who may answer a task: late answers are no offence, rejected ones ban after a few, and any offence can ban."""

from engine.peers.leases import Leases


def test_late_answers_are_free_and_rejected_ones_ban_after_a_few():
    leases = Leases(rejects_before_ban=2)
    leases.ended("t0", b"a")
    assert leases.not_leased("t0", b"a") == "late"
    assert leases.not_leased("t1", b"a") == "rejected"
    assert leases.not_leased("t2", b"a") == "ban"
    assert leases.banned(b"a") and not leases.banned(b"b")
    assert leases.counters == {"late_results": 1, "rejected_results": 2, "banned_workers": 1, "banned_messages": 1}


def test_a_ban_for_another_offence_is_counted_once_under_its_own_name():
    leases = Leases()
    leases.ban(b"f", "flooding_peers")
    leases.ban(b"f", "flooding_peers")
    assert leases.banned(b"f") and leases.banned(b"f")
    assert leases.counters == {"flooding_peers": 1, "banned_messages": 2}
