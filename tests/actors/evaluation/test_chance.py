"""The chance players (actors/evaluation/chance.py): the copy-bot plays the printed example of the LAST observation,
the random player a uniform listed choice, for any chat template; on the probe's seed games every choice set holds
the winning action (but where a game lists no choices), and `eval --backend copy|random` plays a probe folder."""

import json
import random
import shutil
from pathlib import Path

import pytest

from actors.chat import ChatContext
from actors.evaluation import cli
from actors.evaluation.chance import ChanceBackend, choices, examples, user_header
from actors.inference.base import Generation, GenerationRequest
from actors.prompts import agent_first_message
from engine.protocol.paths import SEEDS_DIR
from tests.seed_helpers import probe_seed_games

TEMPLATES = Path(__file__).parents[1] / "data" / "chat_templates"


@pytest.fixture(scope="module")
def copy_bot(tiny_model_path):
    return ChanceBackend(tiny_model_path, "copy")


def _prompt(tokenizer, observations: list[str]) -> str:
    """The agent's context after these observations (replies in between), as the backend decodes it."""
    chat = ChatContext(tokenizer)
    chat.add_user(agent_first_message(observations[0], "", "answer"), prefill="\\boxed{")
    for observation in observations[1:]:
        ids = tokenizer("x}", add_special_tokens=False)["input_ids"]
        chat.add_assistant(Generation(completion_ids=ids, logprobs=[0.0] * len(ids), text="x}", finish_reason="length", policy_version=0))
        chat.add_user(observation, prefill="\\boxed{")
    return tokenizer.decode(chat.ids, skip_special_tokens=False)


@pytest.mark.parametrize("template", [None, "llama3.2-instruct.jinja", "gemma3-it.jinja", "qwen3.jinja"])
def test_the_copy_bot_copies_the_last_observations_first_example(copy_bot, template):
    import copy

    backend = copy.copy(copy_bot)
    if template:
        backend._tokenizer = copy.deepcopy(copy_bot.tokenizer)
        backend._tokenizer.chat_template = (TEMPLATES / template).read_text()
        backend.header = user_header(backend._tokenizer)
    first = "Options: Ann, Bob, Cal. One try. Answer as \\boxed{Bob}."
    assert backend.action(_prompt(backend.tokenizer, [first])) == "Bob"
    later = "Wrong side. Actions: \\boxed{left} or \\boxed{right}."
    assert backend.action(_prompt(backend.tokenizer, [first, later])) == "left"  # not an example of an earlier turn


def test_replies_continue_the_prefilled_box_and_end_the_turn(copy_bot):
    prompt = _prompt(copy_bot.tokenizer, ["Answer as \\boxed{Cal}."])
    ids = copy_bot.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    generation = copy_bot.generate([GenerationRequest(prompt_ids=ids, max_new_tokens=16, temperature=1.0)])[0]
    assert generation.text == "Cal}" and generation.finish_reason == "stop"


@pytest.mark.parametrize(("observation", "offered"), [
    ("Options: Ann, Bob, Cal. Answer as \\boxed{Ann}.", ["Ann", "Bob", "Cal"]),
    ("Options: [3, 4, 5]. Answer one option as \\boxed{4}.", ["3", "4", "5"]),
    ("Reply \\boxed{up} (up/down/left/right).", ["up", "down", "left", "right"]),
    ("Actions: \\boxed{press B} tests a button; \\boxed{answer C} names the wired one. A, B or C; a wrong answer loses.",
     ["press A", "press B", "press C", "answer A", "answer B", "answer C"]),
    ("5*x + 2 = 17, x is 1-9. Answer x as \\boxed{4}.", [str(n) for n in range(1, 10)]),
    ("Items: gem (worth 3), coin (worth 5). Take an item as \\boxed{coin}.", ["gem", "coin"]),
    ("Pick two; one try: \\boxed{AC}.", ["AC"]),  # nothing listed: the example shown
])
def test_the_random_player_draws_among_the_listed_choices(observation, offered):
    assert sorted(choices(observation)) == sorted(offered)


def test_every_probe_game_offers_a_winning_action_and_an_example():
    for file, env_class in probe_seed_games().items():
        for seed in random.Random(0).sample(range(10**6), 200):
            env = env_class()
            observation, _ = env.reset(seed=seed)
            assert examples(observation), f"{file}: no example to copy"
            if file == "optimization_medium.py":  # lists no choices: the random player plays the example
                assert choices(observation) == examples(observation)[:1]
                continue
            offered = choices(observation)  # a winning action among them (causal: the final `answer`, after tests)
            assert any(str(action) in offered for action in env.solution()), f"{file} seed {seed}: {observation}"


def test_eval_plays_a_probe_folder_with_both_chance_players(tiny_model_path, tmp_path):
    folder = tmp_path / "probe-envs"
    folder.mkdir()
    shutil.copy(SEEDS_DIR / "logical_deduction_easy.py", folder)
    (folder / "manifest.json").write_text(json.dumps([{"file": "logical_deduction_easy.py", "skill": "Logical Deduction", "level": "easy"}]))
    for backend in ("copy", "random"):
        code = cli.main([tiny_model_path, "--suite", "envs", "--file", str(folder), "--episodes", "12", "--turns", "1",
                         "--max-tokens", "8", "--backend", backend, "--out", str(tmp_path / "probe"), "--json"])
        assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "probe" / "results.jsonl").read_text().splitlines()]
    by_model = {}
    for row in rows:
        by_model.setdefault(row["model"].split(":")[0], []).append(row)
    assert sorted(by_model) == ["copy", "random"] and all(len(v) == 12 for v in by_model.values())
    names = {f"\\boxed{{{n}}}" for n in "Ann Bob Cal Dan Eve Fay".split()}
    for rows_of_one in by_model.values():  # a listed name every time (the action played), so every game ends on its one try
        assert all(row["answer"] in names and row["failure"] == "" for row in rows_of_one), rows_of_one
