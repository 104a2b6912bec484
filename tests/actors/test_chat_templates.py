"""Token-in/token-out multi-turn contexts under the published chat templates of the common model families.

The templates are the families' own (tests/actors/data/chat_templates/, SOURCES.md says where each came from),
rendered by the tiny test tokenizer with the families' special tokens added. Each episode has three replies, with
and without a think block, ending "stop" (the model sampled the end-of-turn token) or "length" (cut off):
- the trained tokens (mask 1) are the sampled ones, exactly and in order;
- the masked text between replies is the template's end-of-turn (less the sampled stop token) and then the
  template's own rendering of the next turn, computed here independently from the real conversation;
- the action is read after the last `</think>`;
- `chat_template_kwargs` reach the template (Qwen3 with enable_thinking=false: an empty think block per prompt).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.chat import ChatContext
from actors.inference.base import Generation
from actors.parsing import parse_action
from actors.tool_use.parsing import parse_reply

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
           "<bos>", "<start_of_turn>", "<end_of_turn>"]
PLAIN = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # Qwen: not special

# family: (template file, template arguments, bos token, the end-of-turn text after a reply, the stop token sampled)
FAMILIES = {
    "qwen3": ("qwen3.jinja", {}, None, "<|im_end|>\n", "<|im_end|>"),
    "qwen3-no-thinking": ("qwen3.jinja", {"enable_thinking": False}, None, "<|im_end|>\n", "<|im_end|>"),
    "qwen3-instruct-2507": ("qwen3-instruct-2507.jinja", {}, None, "<|im_end|>\n", "<|im_end|>"),
    "qwen2.5-instruct": ("qwen2.5-instruct.jinja", {}, None, "<|im_end|>\n", "<|im_end|>"),
    "llama3.2-instruct": ("llama3.2-instruct.jinja", {}, "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"),
    "gemma3-it": ("gemma3-it.jinja", {}, "<bos>", "<end_of_turn>\n", "<end_of_turn>"),
    "gemma2-it": ("gemma2-it.jinja", {}, "<bos>", "<end_of_turn>\n", "<end_of_turn>"),
    "smollm2-instruct": ("smollm2-instruct.jinja", {}, None, "<|im_end|>\n", "<|im_end|>"),
}
QWEN3 = ("qwen3", "qwen3-no-thinking")
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a key up.",
                                           "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def base_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    tokenizer.add_tokens(PLAIN)
    return tokenizer


def family_tokenizer(base, family: str):
    """The test tokenizer with `family`'s template (and its template arguments, the way the worker passes them)."""
    import copy

    file, kwargs, bos, *_ = FAMILIES[family]
    tokenizer = copy.deepcopy(base)
    tokenizer.chat_template = (TEMPLATES / file).read_text()
    tokenizer.bos_token = bos
    if kwargs:
        from actors.chat import with_chat_template_kwargs

        return with_chat_template_kwargs(tokenizer, kwargs)
    return tokenizer


def generation(tokenizer, text: str, finish: str, stop: str, version: int) -> Generation:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if finish == "stop":
        ids = ids + [tokenizer.convert_tokens_to_ids(stop)]
    return Generation(completion_ids=ids, logprobs=[-0.25 - 0.01 * i for i in range(len(ids))], text=text,
                      finish_reason=finish, policy_version=version)


def runs(chat: ChatContext) -> list[tuple[int, list[int]]]:
    """The context's ids as runs of equal mask: [(mask, ids), ...]."""
    out: list[tuple[int, list[int]]] = []
    for token, mask in zip(chat.ids, chat.mask):
        if out and out[-1][0] == mask:
            out[-1][1].append(token)
        else:
            out.append((mask, [token]))
    return out


def render(tokenizer, messages, generation_prompt, **extra) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **extra)


def next_turn_text(tokenizer, messages: list[dict], reply_tail: str, end_of_turn: str, **extra) -> str:
    """Independently: the template's text for the last turn of `messages` (and the generation prompt), cut from the
    real conversation's rendering after the previous reply (which ends with `reply_tail`) and its end-of-turn."""
    full = render(tokenizer, messages, True, **extra)
    marker = reply_tail + end_of_turn
    assert marker in full, "the reply's end is not in the template's rendering"
    return full[full.rindex(marker) + len(marker):]


def folded(family: str, messages: list[dict]) -> list[dict]:
    """Gemma 2 has no system role: the system goes into the first user message (as ChatContext does)."""
    if family != "gemma2-it" or messages[0]["role"] != "system":
        return messages
    first = {**messages[1], "content": f"{messages[0]['content']}\n\n{messages[1]['content']}"}
    return [first] + messages[2:]


def check_trained_tokens(chat: ChatContext, generations: list[Generation]) -> None:
    sampled = [i for i, m in enumerate(chat.mask) if m]
    assert [chat.ids[i] for i in sampled] == [t for g in generations for t in g.completion_ids]
    assert [chat.logprobs[i] for i in sampled] == [p for g in generations for p in g.logprobs]
    assert [chat.versions[i] for i in sampled] == [g.policy_version for g in generations for _ in g.completion_ids]
    assert all(chat.versions[i] == -1 and chat.logprobs[i] == 0.0 for i, m in enumerate(chat.mask) if not m)
    trained = [ids for mask, ids in runs(chat) if mask]
    assert trained == [g.completion_ids for g in generations]  # each reply one unbroken run, in order


def end_text(end_of_turn: str, stop: str, finish: str) -> str:
    return end_of_turn[len(stop):] if finish == "stop" else end_of_turn


REPLIES = {  # think: (reply text, finish reason) x 3; each ends with a distinct tail so its end can be found
    True: [("<think>\nThe first is odd, \\boxed{9} maybe.\n</think>\n\nMy move: \\boxed{1}", "stop"),
           ("<think>\nCut off while thinking about \\boxed{5}", "length"),
           ("<think>\nNow sure.\n</think>\n\n\\boxed{3}", "stop")],
    False: [("My move: \\boxed{1}", "stop"), ("I will play \\boxed{2} and then", "length"), ("\\boxed{3}", "stop")],
}
ACTIONS = {True: ["\\boxed{1}", "", "\\boxed{3}"], False: ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]}


@pytest.mark.parametrize("think", [True, False], ids=["think", "no-think"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_game_episode(base_tokenizer, family, think):
    tokenizer = family_tokenizer(base_tokenizer, family)
    _, kwargs, _, end_of_turn, stop = FAMILIES[family]
    chat = ChatContext(tokenizer, system="You play a text game.")
    observations = ["Observation 1: pick a number.", "Observation 2: again.", "Observation 3: last one."]
    generations, expected_masked = [], []
    for turn, (text, finish) in enumerate(REPLIES[think]):
        chat.add_user(observations[turn])
        if turn == 0:
            expected_masked.append(render(tokenizer, folded(family, chat.messages), True))
        else:
            tail = REPLIES[think][turn - 1][0][-12:]
            turn_text = next_turn_text(tokenizer, folded(family, chat.messages), tail, end_of_turn)
            expected_masked.append(end_text(end_of_turn, stop, REPLIES[think][turn - 1][1]) + turn_text)
        generations.append(generation(base_tokenizer, text, finish, stop, version=turn + 1))
        chat.add_assistant(generations[-1])
        assert parse_action(text)[0] == ACTIONS[think][turn]
    expected_masked.append(end_text(end_of_turn, stop, REPLIES[think][-1][1]))

    check_trained_tokens(chat, generations)
    masked = [base_tokenizer.decode(ids) for mask, ids in runs(chat) if not mask]
    assert masked == [text for text in expected_masked if text]  # Llama's end-of-turn is the stop token alone
    if family in QWEN3:  # the prompt asks for (or switches off) thinking as enable_thinking says, at every turn
        prompts = masked[:3]
        assert all(p.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") == bool(kwargs) for p in prompts)


def test_unclosed_think_block_has_no_action():
    assert parse_action("<think>\nI would say \\boxed{4} but")[0] == ""
    assert parse_action("<think>a \\boxed{1}</think>b \\boxed{2}</think>\\boxed{3}")[0] == "\\boxed{3}"
    assert parse_reply('<think>\n<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>').calls == []


TOOL_REPLIES = {
    True: [('<think>\nI need the key.\n</think>\n\n<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>', "stop"),
           ('<think>\nAnd b, <answer>draft</answer>\n</think>\n\n<tool_call>\n{"name": "lookup", "arguments": {"key": "b"}}\n</tool_call>', "stop"),
           ("<think>\nDone.\n</think>\n\n<answer>42 and 43</answer>", "length")],
    False: [('<tool_call>\n{"name": "lookup", "arguments": {"key": "a"}}\n</tool_call>', "stop"),
            ('<tool_call>\n{"name": "lookup", "arguments": {"key": "b"}}\n</tool_call>', "length"),
            ("<answer>42 and 43</answer>", "stop")],
}


@pytest.mark.parametrize("think", [True, False], ids=["think", "no-think"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_tool_episode(base_tokenizer, family, think):
    from actors.tool_use.chat import ToolChat

    tokenizer = family_tokenizer(base_tokenizer, family)
    _, _, _, end_of_turn, stop = FAMILIES[family]
    chat = ToolChat(tokenizer, TOOLS)
    extra = {"tools": TOOLS} if chat.native else {}
    chat.add_user("Look up a and b, then answer.")
    generations, expected_masked = [], [render(tokenizer, folded(family, chat.messages), True, **extra)]
    results = [("lookup", "42"), ("lookup", "43")]
    for turn, (text, finish) in enumerate(TOOL_REPLIES[think]):
        generations.append(generation(base_tokenizer, text, finish, stop, version=7))
        chat.add_assistant(generations[-1])
        parsed = parse_reply(text)
        if turn < 2:
            assert parsed.answer is None and [c.arguments for c in parsed.calls] == [{"key": "ab"[turn]}]
            chat.add_tool_results([results[turn]])
            tail = text[-12:]
            turn_text = next_turn_text(tokenizer, folded(family, chat.messages), tail, end_of_turn, **extra)
            expected_masked.append(end_text(end_of_turn, stop, finish) + turn_text)
        else:
            assert parsed.answer == "42 and 43"
            expected_masked.append(end_text(end_of_turn, stop, finish))
    assert chat.native == (family not in ("gemma3-it", "gemma2-it", "smollm2-instruct"))  # those ignore tools=
    assert chat.tool_role == ("user" if family.startswith("gemma") else "tool")  # Gemma has no tool role

    check_trained_tokens(chat, generations)
    masked = [base_tokenizer.decode(ids) for mask, ids in runs(chat) if not mask]
    assert masked == [text for text in expected_masked if text]  # Llama's end-of-turn is the stop token alone
    if chat.tool_role == "tool" and family.startswith("qwen"):
        assert "<tool_response>\n43\n</tool_response>" in masked[2]


def test_template_kwargs_reach_every_render(base_tokenizer):
    from actors.chat import with_chat_template_kwargs

    plain = family_tokenizer(base_tokenizer, "qwen3")
    empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    for chat in (ChatContext(plain, template_kwargs={"enable_thinking": False}),
                 ChatContext(with_chat_template_kwargs(plain, {"enable_thinking": False}))):
        chat.add_user("first")
        chat.add_assistant(generation(base_tokenizer, "\\boxed{1}", "stop", "<|im_end|>", 0))
        chat.add_user("second")
        text = base_tokenizer.decode(chat.ids)
        assert text.count(empty_think) == 2 and text.endswith(empty_think)
    thinking = ChatContext(plain)
    thinking.add_user("first")
    assert "<think>" not in base_tokenizer.decode(thinking.ids)
    assert with_chat_template_kwargs(plain, {}) is plain


def test_malformed_tool_call_masks_the_reply_not_its_end_of_turn(base_tokenizer):
    from actors.tool_use.chat import ToolChat

    chat = ToolChat(family_tokenizer(base_tokenizer, "qwen2.5-instruct"), TOOLS)
    chat.add_user("go")
    reply = generation(base_tokenizer, "<tool_call>\nnot json\n</tool_call>", "stop", "<|im_end|>", 2)
    chat.add_assistant(reply)
    chat.mask_last(len(reply.completion_ids))
    assert sum(chat.mask) == 0
    assert chat.ids[-1] == base_tokenizer("\n", add_special_tokens=False)["input_ids"][0]  # the end-of-turn's rest
