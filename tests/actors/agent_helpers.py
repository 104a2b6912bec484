"""Fakes the agent and designer tests share: a tokenizer that needs no model."""


class FakeTokenizer:
    """Characters as tokens; ChatML-like rendering."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def convert_ids_to_tokens(self, token_id):
        return chr(token_id)
