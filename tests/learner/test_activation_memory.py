"""The activation measurement (learner/activation_memory.py) runs the model under FakeTensorMode (no arithmetic):
it counts exactly what a real forward and backward keep on a narrow Qwen3 slice, so the full-width figures the
memory plan uses (tests/learner/test_memory_plan.py) are measurements."""

import pytest
from transformers import Qwen3Config

from learner.activation_memory import measure_activations


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_the_fake_count_is_a_real_runs_count(dtype):
    narrow = Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    fake = measure_activations(narrow, dtype=dtype, tokens=(32, 64))
    real = measure_activations(narrow, dtype=dtype, tokens=(32, 64), fake=False)
    assert fake == real
    width = 2 if dtype == "bfloat16" else 4
    assert fake.boundary == width * 128  # a checkpointed layer keeps its input hidden state
    assert fake.layer[1] == 0.0 and fake.layer_padded[1] > 0  # unpadded: linear (flash path); padded: the mask
