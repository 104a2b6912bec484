"""Stop strings (GenerationRequest.stop, actors/inference/base.py `cut_at_stop`) on the transformers and scripted
backends (the vLLM backend's are in test_vllm.py, run by `bin/test --vllm`), and where the agent asks for them
(`play.stop_at_action`: actors/parsing.py and actors/tool_use/parsing.py `action_stops`)."""

import json

import pytest

from actors.inference.base import GenerationRequest, cut_at_stop
from actors.inference.hf import TransformersBackend, load_tokenizer
from actors.inference.scripted import ScriptedBackend
from actors.parsing import action_stops
from actors.tool_use import parsing as tool_parsing
from engine.protocol.config import PlayConfig
from tests.actors.inference.stop_helpers import assert_stops_at_the_first_stop_string, expected_cut

PROMPT = [5, 6, 7, 8, 9, 10]


def test_cut_at_stop_keeps_the_token_that_completes_the_earliest_stop(tiny_model_path):
    tokenizer = load_tokenizer(tiny_model_path)
    ids = tokenizer("Ann} then Bob} and more", add_special_tokens=False)["input_ids"]
    cut = cut_at_stop(tokenizer, ids, ("}", "Bob"))
    assert cut == expected_cut(tokenizer, ids, "}") and tokenizer.decode(cut).endswith("}")
    assert tokenizer.decode(cut).count("}") == 1
    assert cut_at_stop(tokenizer, ids, ("zzz",)) is None and cut_at_stop(tokenizer, ids, ()) is None
    assert cut_at_stop(tokenizer, [], ("}",)) is None


def test_the_transformers_backend_stops_at_the_first_stop_string(tiny_model_path):
    assert_stops_at_the_first_stop_string(TransformersBackend(tiny_model_path, seed=0), PROMPT)


def test_requests_with_different_stops_in_one_batch_keep_their_own(tiny_model_path):
    backend = TransformersBackend(tiny_model_path, seed=0)
    free = backend.generate([GenerationRequest(prompt_ids=PROMPT, max_new_tokens=16, temperature=0.0)])[0]
    texts = [backend.tokenizer.decode(free.completion_ids[i:i + 2], skip_special_tokens=True) for i in range(1, 14)]
    stop = next(t for t in texts if t.strip())
    both = backend.generate([GenerationRequest(prompt_ids=PROMPT, max_new_tokens=16, temperature=0.0, stop=(stop,)),
                             GenerationRequest(prompt_ids=PROMPT, max_new_tokens=16, temperature=0.0)])
    assert both[0].finish_reason == "stop" and len(both[0].completion_ids) < len(free.completion_ids)
    assert both[1].completion_ids == free.completion_ids


def test_the_scripted_backend_ends_its_text_at_a_stop_string(tiny_model_path, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"designer": ["x"], "hint": ["h"], "agent": ["Ann} and then some more words"]}))
    backend = ScriptedBackend(tiny_model_path, str(script))
    stopped = backend.generate([GenerationRequest(prompt_ids=PROMPT, max_new_tokens=32, temperature=1.0, stop=("}",))])[0]
    assert stopped.text == "Ann}" and stopped.finish_reason == "stop" and len(stopped.logprobs) == len(stopped.completion_ids)
    free = backend.generate([GenerationRequest(prompt_ids=PROMPT, max_new_tokens=32, temperature=1.0)])[0]
    assert free.text == "Ann} and then some more words" and free.finish_reason == "stop"  # ended by its end-of-turn token


@pytest.mark.parametrize(("prefill", "on", "stops"), [
    ("\\boxed{", True, ("}",)),
    ("\\boxed{", False, ()),
    ("", True, ()),  # a reply that reasons first may write braces before its box
])
def test_game_replies_stop_at_the_box_the_prefill_opens(prefill, on, stops):
    assert action_stops(PlayConfig(agent_prefill=prefill, stop_at_action=on)) == stops


def test_tool_use_replies_stop_at_the_answer_or_a_complete_call():
    assert tool_parsing.action_stops(PlayConfig(stop_at_action=True)) == ("</answer>", "</tool_call>")
    assert tool_parsing.action_stops(PlayConfig(stop_at_action=False)) == ()
