"""Where reward variance comes from: groups whose plays all copied their printed example against groups where a
play departed, counted over hand-made plays and read back from a store through the run's tokenizer."""

from __future__ import annotations

from engine.protocol.messages import Sample, TurnRecord, pack_floats, pack_ints, pack_mask
from engine.protocol.paths import RunPaths
from engine.tools.group_variance import GroupPlay, printed_example, read_plays, variance_sources
from storage.records import TrajectoryRecord
from storage.store import Store


def test_the_printed_example_is_the_first_non_empty_box():
    assert printed_example("Pick a colour. Answer as \\boxed{} or \\boxed{ blue }, then \\boxed{red}.") == "blue"
    assert printed_example("Pick a colour.") is None


def test_groups_are_told_apart_by_whether_a_play_departed_from_its_example():
    plays = [
        GroupPlay("a", 0, True, 1.0), GroupPlay("a", 0, True, 0.0),  # all copied, returns differ: the instances' luck
        GroupPlay("b", 0, True, 1.0), GroupPlay("b", 0, False, 0.0),  # one departed
        GroupPlay("a", 1, True, 0.0), GroupPlay("a", 1, False, 0.0),  # no variance (another step: another group)
        GroupPlay("c", 0, None, 1.0), GroupPlay("c", 0, True, 0.0),  # one play had no example to copy
        GroupPlay("d", 0, None, 1.0), GroupPlay("d", 0, False, 0.0),  # one departed, one had none: a departure
    ]
    assert variance_sources(plays) == {"groups": 5, "with_variance": 4, "all_copied": 1, "with_departure": 2, "no_example": 1,
                                       "copy_share": round(5 / 8, 4)}
    assert variance_sources([]) == {"groups": 0, "with_variance": 0, "all_copied": 0, "with_departure": 0, "no_example": 0, "copy_share": None}


def test_plays_are_read_from_the_store_with_what_their_first_observation_printed(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    paths.update_meta(model_path=tiny_model_path)
    store = Store.open(paths.store)
    plays = [("no_hint", "blue", "\\boxed{blue}", 1.0), ("no_hint", "blue", "red", 0.0), ("no_hint", "red", "red", 0.0),
             ("hint", "blue", "\\boxed{red}", 1.0)]
    with store.batch() as batch:
        for i, (arm, example, action, ret) in enumerate(plays):
            prompt = tokenizer.encode(f"Observation: Pick a colour. Answer as \\boxed{{{example}}}.\nReply with your action only")
            ids = prompt + tokenizer.encode(action)
            n, m = len(prompt), len(ids) - len(prompt)
            sample = Sample(sample_id=f"p{i}", role="agent", env_id="e", skill="Logic", arm=arm, step=3, tokens=pack_ints(ids),
                            loss_mask=pack_mask([0] * n + [1] * m), logprobs=pack_floats([0.0] * len(ids)),
                            versions=pack_ints([-1] * n + [0] * m), reward=ret)
            turn = TurnRecord(action=action, parse_rule="boxed_first", reward=ret, terminated=True, truncated=False, policy_version=0, observation_chars=9)
            batch.put_trajectory(TrajectoryRecord(sample_id=f"p{i}", role="agent", env_id="e", skill="Logic", arm=arm, step=3, seed=i,
                                                  status="completed", failure="", episode_return=ret, turns=[turn], sample=sample, created_at=1.0))
    store.close()
    # the action as env.step got it: a boxed answer or bare text; the hinted play is left out
    assert read_plays(paths) == [GroupPlay("e", 3, True, 1.0), GroupPlay("e", 3, False, 0.0), GroupPlay("e", 3, True, 0.0)]
    assert read_plays(paths, steps=range(0, 3)) == []
    assert variance_sources(read_plays(paths))["with_departure"] == 1
