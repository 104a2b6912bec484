"""A tiny random causal LM built at run time (no download), for tests and benchmarks.

    path = build_tiny_model(folder)    # ByteLevel BPE tokenizer (vocab 4096) trained on the stdlib's .py files,
                                       # a random Qwen3 model (hidden 256, 4 layers), a ChatML chat template

It exercises every real code path (generation, log-probs, loss, optimizer, checkpoints, weight sync) in seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _training_texts(limit_bytes: int = 3_000_000):
    stdlib = Path(os.__file__).parent
    total = 0
    for file in sorted(stdlib.glob("*.py")):
        text = file.read_text(errors="replace")
        total += len(text)
        yield text
        if total > limit_bytes:
            break
    repo = Path(__file__).resolve().parent.parent
    for file in sorted((repo / "actors").rglob("*.py")):
        yield file.read_text(errors="replace")


def build_tiny_model(folder: str | Path, *, vocab_size: int = 4096, hidden: int = 256, layers: int = 4, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    folder = Path(folder)
    if (folder / "config.json").exists():
        return folder
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(_training_texts(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHATML
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=fast.vocab_size if hasattr(fast, "vocab_size") else vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    tmp = folder.with_name(f".tmp-{folder.name}")
    model.save_pretrained(tmp, safe_serialization=True)
    fast.save_pretrained(tmp)
    tmp.rename(folder)
    return folder


if __name__ == "__main__":
    import sys

    print(build_tiny_model(sys.argv[1]))
