"""Multi-turn token bookkeeping: sampled tokens kept as sampled, template text between turns masked out."""

from actors.chat import ChatContext
from actors.inference.base import Generation


def test_context_tokens_decode_to_the_rendered_conversation(tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    chat = ChatContext(tokenizer, system="be brief")
    chat.add_user("first observation")
    reply_ids = tokenizer("\\boxed{3}", add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    chat.add_assistant(Generation(completion_ids=reply_ids, logprobs=[-0.5] * len(reply_ids), text="\\boxed{3}", finish_reason="stop", policy_version=4))
    chat.add_user("second observation")
    expected = tokenizer.apply_chat_template(chat.messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(chat.ids) == expected
    assert sum(chat.mask) == len(reply_ids)
    sampled = [i for i, m in enumerate(chat.mask) if m]
    assert [chat.ids[i] for i in sampled] == reply_ids
    assert {chat.versions[i] for i in sampled} == {4}
    assert all(chat.versions[i] == -1 for i, m in enumerate(chat.mask) if not m)


def test_reply_cut_by_length_gets_the_end_of_turn_from_the_template(tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    chat = ChatContext(tokenizer)
    chat.add_user("obs")
    ids = tokenizer("partial reply", add_special_tokens=False)["input_ids"]
    chat.add_assistant(Generation(completion_ids=ids, logprobs=[0.0] * len(ids), text="partial reply", finish_reason="length", policy_version=0))
    chat.add_user("next")
    assert tokenizer.decode(chat.ids) == tokenizer.apply_chat_template(chat.messages, tokenize=False, add_generation_prompt=True)
    assert sum(chat.mask) == len(ids)
