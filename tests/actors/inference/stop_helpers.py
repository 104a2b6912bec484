"""Shared check of the backends' stop strings (GenerationRequest.stop): a backend stops where the text first holds a
stop string, keeping the token that completes it, as greedy generation without the stop would have gone."""

from actors.inference.base import GenerationRequest


def expected_cut(tokenizer, ids: list[int], stop: str) -> list[int]:
    """The shortest prefix of `ids` whose text holds `stop` (counted the slow way, token by token)."""
    for n in range(1, len(ids) + 1):
        if stop in tokenizer.decode(ids[:n], skip_special_tokens=True):
            return ids[:n]
    raise AssertionError(f"{stop!r} is not in the text of {ids}")


def assert_stops_at_the_first_stop_string(backend, prompt: list[int]) -> None:
    free = backend.generate([GenerationRequest(prompt_ids=prompt, max_new_tokens=24, temperature=0.0)])[0]
    ids = [t for t in free.completion_ids if t not in backend.stop_ids]
    # the text of two tokens after the first two, the first such pair with visible text
    texts = [backend.tokenizer.decode(ids[i:i + 2], skip_special_tokens=True) for i in range(2, len(ids) - 1)]
    stop = next((t for t in texts if t.strip()), None)
    assert stop is not None, f"the greedy reply has no visible text to stop at: {ids}"
    want = expected_cut(backend.tokenizer, ids, stop)
    stopped = backend.generate([GenerationRequest(prompt_ids=prompt, max_new_tokens=24, temperature=0.0, stop=(stop, "never-seen-text"))])[0]
    assert stopped.completion_ids == want and stopped.finish_reason == "stop"
    assert len(stopped.logprobs) == len(want) and stopped.logprobs == free.logprobs[: len(want)]
    assert stopped.text.endswith(stop) or stop in stopped.text
    # without a stop string that occurs, nothing changes
    same = backend.generate([GenerationRequest(prompt_ids=prompt, max_new_tokens=24, temperature=0.0, stop=("never-seen-text",))])[0]
    assert same.completion_ids == free.completion_ids and same.finish_reason == free.finish_reason
