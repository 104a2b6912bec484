"""The learner process's housekeeping: pruning old checkpoints keeps the newest ones and the current one."""

from learner.train import prune_checkpoints


def test_prune_keeps_the_newest_checkpoints_and_the_current_one(tmp_path):
    for step in (3, 10, 7, 12):
        (tmp_path / f"step-{step:06d}").mkdir()
    (tmp_path / ".tmp-step-000013").mkdir()  # not a checkpoint (yet)
    prune_checkpoints(tmp_path, keep=2, current=tmp_path / "step-000012")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-step-000013", "step-000010", "step-000012"]
    prune_checkpoints(tmp_path, keep=1, current=tmp_path / "step-000010")  # an extended run re-wrote an older step
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-step-000013", "step-000010", "step-000012"]
    prune_checkpoints(tmp_path, keep=0, current=tmp_path / "step-000012")
    assert len(list(tmp_path.iterdir())) == 3
