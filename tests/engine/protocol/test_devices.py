"""The one CUDA_VISIBLE_DEVICES selection (engine/protocol/devices.py) the inference workers and the learner share."""

import os

import pytest

from engine.protocol.devices import select_gpus


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
