"""The one CUDA_VISIBLE_DEVICES selection (engine/protocol/devices.py) the inference workers and the learner share,
and their CPU threads and cores."""

import os

import pytest

from engine.protocol.config_loading import load_config
from engine.protocol.devices import core_list, cpu_share, pin_process, select_gpus


def test_indices_name_devices_or_pick_from_the_ones_already_shown(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    select_gpus([1, 2], "learner.gpus")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    select_gpus([2, 0], "inference.gpus")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,4"


def test_empty_leaves_the_environment_and_an_index_past_the_shown_ones_is_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    select_gpus([], "inference.gpus")
    with pytest.raises(ValueError, match=r"inference.gpus = \[2\]: CUDA_VISIBLE_DEVICES shows only 2 GPUs \(4,5\)"):
        select_gpus([2], "inference.gpus")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_cpu_threads_are_all_cores_unless_the_learner_overlaps_the_generator(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    serial = load_config(overrides=["run.max_staleness=0"])
    assert cpu_share(serial, "learner") == (5, None) and cpu_share(serial, "inference") == (5, None)
    overlapped = load_config(overrides=["run.max_staleness=1"])
    assert cpu_share(overlapped, "inference") == (2, [0, 1]) and cpu_share(overlapped, "learner") == (3, [2, 3, 4])
    own = load_config(overrides=["run.max_staleness=1", "learner.threads=4"])  # set by hand: as asked, nothing pinned
    assert cpu_share(own, "learner") == (4, None) and cpu_share(own, "inference") == (5, None)
    no_local_workers = load_config(overrides=["run.max_staleness=1", "worker.count=0"])
    assert cpu_share(no_local_workers, "learner") == (5, None)


def test_core_lists_as_vllm_reads_them_and_pinning_takes():
    assert core_list([0]) == "0-0" and core_list([2, 3]) == "2-3" and core_list([0, 2, 3]) == "0,2,3"
    before = os.sched_getaffinity(0)
    try:
        pin_process([min(before)])
        assert os.sched_getaffinity(0) == {min(before)}
    finally:
        pin_process(sorted(before))
