"""`inspect`: the environment list with filters and sorting, one environment, one trajectory as a transcript
(decoded with the run's tokenizer), and a bad record skipped with its name."""

from __future__ import annotations

from engine.cli import main
from engine.protocol.messages import Sample, TurnRecord, pack_floats, pack_ints, pack_mask
from storage.records import TrajectoryRecord
from storage.store import Store

from run_builder import ENV_A, ENV_B, ENV_BAD


def _out(capsys, argv, code=0) -> str:
    assert main(argv) == code
    captured = capsys.readouterr()
    return captured.out if code == 0 else captured.err


def test_the_list_shows_verdicts_win_rates_regret_and_designer_reward(small_run, capsys):
    lines = _out(capsys, ["inspect", str(small_run.paths.root)]).splitlines()
    assert lines[0].split() == ["env", "skill", "step", "parent", "verdict", "win(no", "hint)", "win(hint)", "regret", "reward"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[ENV_A][-4:] == ["0.50", "1.00", "+0.50", "1.000"]
    assert rows[ENV_B][-4:] == ["0.00", "0.00", "+0.00", "0.000"]
    assert "rejected:" in lines[[i for i, l in enumerate(lines) if l.startswith(ENV_BAD)][0]]


def test_filters_and_sorting(small_run, capsys):
    root = str(small_run.paths.root)
    valid = _out(capsys, ["inspect", root, "--verdict", "valid", "--sort", "regret", "--desc"]).splitlines()[1:]
    assert [line.split()[0] for line in valid] == [ENV_A, ENV_B]
    rejected = _out(capsys, ["inspect", root, "--verdict", "rejected"]).splitlines()[1:]
    assert [line.split()[0] for line in rejected] == [ENV_BAD]
    assert "error: no environment in" in _out(capsys, ["inspect", root, "--skill", "Chess"], code=2)
    assert "error: --sort size: choose one of step, skill, regret" in _out(capsys, ["inspect", root, "--sort", "size"], code=2)


def test_one_environment_shows_code_hint_passage_and_validation(small_run, capsys):
    text = _out(capsys, ["inspect", str(small_run.paths.root), "--env", ENV_BAD])
    assert "verdict rejected: single_env_class" in text
    assert "    pass  parses: ast.parse succeeded" in text and "    FAIL  single_env_class: no Env class" in text
    assert "code:\n    class Broken: pass" in text and "passage p1:" in text
    text = _out(capsys, ["inspect", str(small_run.paths.root), "--env", ENV_A])
    assert "hint:\n    Pick the one you see." in text and f"00000000/p-{ENV_A}-no_hint-0  agent no_hint completed return +0.00" in text
    assert "error: no environment 'nope' in" in _out(capsys, ["inspect", str(small_run.paths.root), "--env", "nope"], code=2)


PROMPT = ("<|im_start|>user\nYou are playing a language game. Make valid actions to win.\nObservation: Pick 1 or 2.\n"
          "Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n")
PIECES = [(PROMPT, 0), ("I pick \\boxed{2}<|im_end|>", 1), ("\n<|im_start|>user\nWrong pick.<|im_end|>\n<|im_start|>assistant\n", 0),
          ("\\boxed{1}<|im_end|>", 1)]

TRANSCRIPT = """trajectory 00000003/play-1  agent no_hint  env s0003-e00-a1 (Logic)  seed 7  status completed  return +1.00
--- user
You are playing a language game. Make valid actions to win.
Observation: Pick 1 or 2.
Please reason step by step, and put your final answer within \\boxed{}.
--- agent turn 1 (policy v3)
I pick \\boxed{2}<|im_end|>
    => action '2' (boxed_last)  reward +0.00
--- observation
Wrong pick.
--- agent turn 2 (policy v4)
\\boxed{1}<|im_end|>
    => action '1' (boxed_last)  reward +1.00  terminated
"""


def test_a_trajectory_is_a_readable_transcript(small_run, tiny_model_path, capsys):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{tiny_model_path}/tokenizer.json")
    ids, mask, versions, version = [], [], [], 3
    for text, sampled in PIECES:
        piece = tokenizer.encode(text, add_special_tokens=False).ids
        ids += piece
        mask += [sampled] * len(piece)
        versions += [version if sampled else -1] * len(piece)
        version += sampled
    sample = Sample(sample_id="play-1", role="agent", env_id="s0003-e00-a1", skill="Logic", arm="no_hint", step=3, tokens=pack_ints(ids),
                    loss_mask=pack_mask(mask), logprobs=pack_floats([0.0] * len(ids)), versions=pack_ints(versions), reward=1.0)
    turns = [TurnRecord(action="2", parse_rule="boxed_last", reward=0.0, terminated=False, truncated=False, policy_version=3, observation_chars=11),
             TurnRecord(action="1", parse_rule="boxed_last", reward=1.0, terminated=True, truncated=False, policy_version=4, observation_chars=8)]
    store = Store.open(small_run.paths.store)
    with store.batch() as batch:
        batch.put_trajectory(TrajectoryRecord(sample_id="play-1", role="agent", env_id="s0003-e00-a1", skill="Logic", arm="no_hint", step=3,
                                              seed=7, status="completed", failure="", episode_return=1.0, turns=turns, sample=sample, created_at=0.0))
    store.close()
    small_run.paths.update_meta(model_path=tiny_model_path)
    assert _out(capsys, ["inspect", str(small_run.paths.root), "--trajectory", "play-1"]) == TRANSCRIPT
    assert _out(capsys, ["inspect", str(small_run.paths.root), "--trajectory", "00000003/play-1"]) == TRANSCRIPT


def test_without_a_tokenizer_the_stored_turns_are_shown(small_run, capsys):
    text = _out(capsys, ["inspect", str(small_run.paths.root), "--trajectory", f"p-{ENV_A}-hint-1"])
    assert "(no tokenizer.json in the run's model folder: the stored turns only)\nturn 1: action '2' (boxed_last)  reward +1.00  v0" in text


def test_a_bad_record_is_reported_and_the_rest_listed(small_run, capsys):
    store = Store.open(small_run.paths.store)
    with store._env.begin(write=True) as txn:
        txn.put(b"zz-broken", b"\xc1", db=store._dbs["environments"])
    store.close()
    assert main(["inspect", str(small_run.paths.root)]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert "damaged record, the first: record 'zz-broken' in database 'environments' is corrupt" in captured.err
    assert ENV_A in captured.out and ENV_BAD in captured.out and "Traceback" not in captured.err
