"""engine/protocol/containment.py: what a level leaves open, from its name, for every level the sandbox has."""

import pytest

from actors.sandbox import IsolationLevel
from engine.protocol.containment import HOST_READS, NETWORK, uncontained


def test_every_level_says_what_it_leaves_open_from_its_traits():
    for level in IsolationLevel:
        expected = ([] if level.protects_host_files else [HOST_READS]) + \
                   ([] if level.has_namespaces or level.has_seccomp else [NETWORK])
        assert uncontained(str(level)) == level.uncontained == expected, level


def test_full_containment_and_the_weakest_levels():
    assert uncontained("bubblewrap+seccomp") == uncontained("rlimits+landlock+seccomp") == []
    assert uncontained("rlimits+seccomp") == [HOST_READS]
    assert uncontained("rlimits") == [HOST_READS, NETWORK]


@pytest.mark.parametrize("level", ["docker", "", "rlimits+magic", "x" * 500])
def test_a_name_no_level_has_is_not_trusted(level):
    (said,) = uncontained(level)
    assert said.startswith("everything: ") and len(said) < 120
