"""Each local suite format scored on its shipped example file: right, wrong and malformed answers, and for code a
solution that hangs and ones that attack the sandbox (all score 0, and the evaluation goes on)."""

from __future__ import annotations

import msgspec
import pytest
import trio

from actors.evaluation import scoring
from actors.evaluation.oracle import OracleBackend
from actors.evaluation.runner import play_item
from actors.evaluation.suites import SuiteError, load_suite
from actors.inference.batcher import Batcher
from engine.protocol.config import PlayConfig, SandboxConfig


def _play(tiny_model_path, suite, replies: dict[str, str], pool_needed=False):
    """Play every item of `suite` with the oracle backend answering `replies[item.dataset-less id]`."""
    backend = OracleBackend(tiny_model_path)
    play = msgspec.structs.replace(PlayConfig(), max_context_tokens=8192)
    settings = msgspec.structs.replace(suite.settings, max_tokens=512)
    out = {}

    async def main():
        from actors.sandbox import open_sandbox_pool

        async with trio.open_nursery() as nursery:
            batcher = Batcher(backend, max_batch=4, wait_s=0.0)
            await nursery.start(batcher.run)
            s = SandboxConfig()
            if pool_needed:
                async with open_sandbox_pool(workers=2, step_timeout_s=2.0, episode_timeout_s=30.0, memory_mb=256,
                                             cpu_seconds=10, max_output_bytes=s.max_output_bytes, episodes_per_worker=50,
                                             isolation="auto") as pool:
                    for item in suite.items:
                        out[item.episode] = await play_item(item, settings=settings, batcher=batcher, tokenizer=backend.tokenizer,
                                                            play_config=play, pool=pool, rg=None, oracle=backend,
                                                            answer=lambda it, ref: replies[it.episode])
            else:
                for item in suite.items:
                    out[item.episode] = await play_item(item, settings=settings, batcher=batcher, tokenizer=backend.tokenizer,
                                                        play_config=play, pool=None, rg=None, oracle=backend,
                                                        answer=lambda it, ref: replies[it.episode])
            nursery.cancel_scope.cancel()

    trio.run(main)
    return out


def test_math_example_right_wrong_malformed(tiny_model_path):
    suite = load_suite("math", episodes=1)
    assert [i.episode for i in suite.items] == ["sum.0", "frac.0", "big.0"]
    out = _play(tiny_model_path, suite, {
        "sum.0": "17 + 25 = 42, so the answer is \\boxed{42}.",
        "frac.0": "It is \\boxed{2/3}.",  # wrong
        "big.0": "twelve thousand",  # malformed: no \boxed{}
    })
    assert (out["sum.0"]["win"], out["sum.0"]["answer"]) == (True, "42")
    assert (out["frac.0"]["win"], out["frac.0"]["answer"]) == (False, "2/3")
    assert (out["big.0"]["win"], out["big.0"]["answer"]) == (False, None)


def test_math_normalisation():
    assert scoring.normalise_math("\\dfrac{3}{4}") == scoring.normalise_math("0.75") == "3/4"
    assert scoring.normalise_math("12,000") == scoring.normalise_math("12000.0") == "12000"
    assert scoring.normalise_math("$\\text{ 5 }$.") == "5"
    assert scoring.last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert scoring.score_math("\\boxed{\\frac{3}{4}}", "6/8") == (1.0, "\\frac{3}{4}")


def test_science_example_right_wrong_malformed(tiny_model_path):
    suite = load_suite("science", episodes=1)
    assert [(i.answer, i.choices) for i in suite.items] == [("B", 4), ("C", 4), ("B", 4)]  # letter, index, choice text
    out = _play(tiny_model_path, suite, {
        "water.0": "Water is H2O: \\boxed{B}",
        "planet.0": "The answer is (A).",  # wrong
        "noble.0": "I think it is argon or maybe helium",  # malformed: no letter
    })
    assert [out[k]["win"] for k in ("water.0", "planet.0", "noble.0")] == [True, False, False]
    assert [out[k]["answer"] for k in ("water.0", "planet.0", "noble.0")] == ["B", "A", None]
    assert scoring.reply_letter("Answer: (c)", 4) == "C"
    assert scoring.reply_letter("\\boxed{E}", 4) is None  # not one of the choices


HANG = "def add(a, b):\n    while True:\n        pass\n"
ATTACK_IMPORT = "import os\n\ndef add(a, b):\n    os.system('touch /tmp/spade-eval-pwned')\n    return a + b\n"
ATTACK_ESCAPE = "def add(a, b):\n    ().__class__.__base__.__subclasses__()\n    return open('/etc/passwd').read()\n"


def test_code_example_right_wrong_malformed_hang_attack(tiny_model_path, tmp_path):
    suite = load_suite("code", episodes=1)
    add = next(i for i in suite.items if i.dataset == "code_example" and i.episode == "add.0")
    items = [msgspec.structs.replace(add, episode=name) for name in ("right", "wrong", "malformed", "hang", "import", "escape")]
    items += [i for i in suite.items if i.episode != "add.0"]  # the reference solutions of the other two
    suite = msgspec.structs.replace(suite, items=items)
    fence = "```python\n{}\n```"
    out = _play(tiny_model_path, suite, {
        "right": fence.format("def add(a, b):\n    return a + b"),
        "wrong": fence.format("def add(a, b):\n    return a - b"),
        "malformed": "",
        "hang": fence.format(HANG),
        "import": fence.format(ATTACK_IMPORT),
        "escape": fence.format(ATTACK_ESCAPE),
        "fib.0": next(i.reference for i in load_suite("code").items if i.episode == "fib.0"),
        "words.0": next(i.reference for i in load_suite("code").items if i.episode == "words.0"),
    }, pool_needed=True)
    assert out["right"]["win"] and out["fib.0"]["win"] and out["words.0"]["win"]
    for name in ("wrong", "malformed", "hang", "import", "escape"):
        assert out[name]["win"] is False and out[name]["score"] == 0.0, (name, out[name])
    assert "AssertionError" in out["wrong"]["failure"]
    assert out["malformed"]["answer"] is None
    assert out["hang"]["failure"].startswith("timeout")
    assert out["import"]["failure"] and out["escape"]["failure"]
    assert not __import__("os").path.exists("/tmp/spade-eval-pwned")


def test_code_environment_is_one_env_class():
    source = scoring.code_test_environment("def f():\n    return 1", "assert f() == 1")
    assert source.count("Env:") == 1 and "    assert f() == 1" in source


def test_suite_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(SuiteError, match="line 1: `answer` is missing"):
        load_suite("math", path=bad)
    bad.write_text('{"question": "q", "choices": ["a", "b"], "answer": "Z"}\n')
    with pytest.raises(SuiteError, match="neither a letter"):
        load_suite("science", path=bad)
    with pytest.raises(SuiteError, match="not in the rg-hard suite"):
        load_suite("rg-hard", datasets=["nope"])
    with pytest.raises(SuiteError, match="needs --file DIR"):
        load_suite("envs")
