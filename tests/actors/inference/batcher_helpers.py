"""What the batcher tests share (test_batcher.py, test_batcher_hold.py): requests named by a key, fake backends that
record what ran on which version, and a runner that serves a batcher while a test body acts."""

import threading

import trio

from actors.inference.base import Generation, GenerationRequest, InferenceBackend


def make_request(key: int) -> GenerationRequest:
    """A request named by its first prompt token, so every reply can be traced back to its caller."""
    return GenerationRequest(prompt_ids=[key], max_new_tokens=16, temperature=1.0)


def make_reply(request: GenerationRequest, version: int) -> Generation:
    key = request.prompt_ids[0]
    n = key + 1  # a length per caller, so token counts are checkable
    return Generation(completion_ids=[key] * n, logprobs=[-0.5] * n, text=f"reply {key}", finish_reason="length", policy_version=version)


class RecordingBackend(InferenceBackend):
    """A blocking backend that records each batch and the version it ran under.

    `release` is open unless a test closes it; a closed one holds `generate` (in the batcher's thread) until the
    test opens it, and `entered` tells the test that a call has begun. Requests whose key is in `poison` fail
    their whole batch.
    """

    name = "recording"

    def __init__(self, poison=()):
        self.calls: list[tuple[list[int], int]] = []
        self.loads: list[tuple[str, int, bool]] = []  # (path, version, whether a generate call was running)
        self.poison = set(poison)
        self.generating = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    @property
    def tokenizer(self):
        return None

    def generate(self, requests):
        self.generating = True
        try:
            version = self.policy_version
            self.calls.append(([r.prompt_ids[0] for r in requests], version))
            self.entered.set()
            if not self.release.wait(timeout=10):
                raise TimeoutError("the test never released generate")
            if any(r.prompt_ids[0] in self.poison for r in requests):
                raise RuntimeError("boom")
            assert self.policy_version == version, "weights changed in the middle of a generate call"
            return [make_reply(r, version) for r in requests]
        finally:
            self.generating = False

    def load_weights(self, path, version):
        self.loads.append((path, version, self.generating))
        self.policy_version = version


async def ask(batcher, key, results):
    try:
        results[key] = await batcher.generate(make_request(key))
    except Exception as exc:
        results[key] = exc


async def queue(nursery, batcher, keys, results):
    """Callers for `keys`, each queued (blocked on its reply) before the next starts: a known channel order."""
    for key in keys:
        nursery.start_soon(ask, batcher, key, results)
        await trio.testing.wait_all_tasks_blocked()


def serve(batcher, body, timeout_s: float = 10.0) -> None:
    """Run `body(nursery)` while `batcher` serves in the same nursery, then stop it."""

    async def main():
        with trio.fail_after(timeout_s):
            async with trio.open_nursery() as nursery:
                await nursery.start(batcher.run)
                await body(nursery)
                nursery.cancel_scope.cancel()

    trio.run(main)


async def until(predicate):
    while not predicate():
        await trio.sleep(0.001)


class ConcurrentBackend(InferenceBackend):
    """A natively concurrent backend: each `generate_async` call waits on its own trio event, set by the test."""

    name = "concurrent"

    def __init__(self):
        self.gates: dict[int, trio.Event] = {}
        self.started: list[tuple[int, int]] = []  # (key, version it was served under)
        self.loads: list[tuple[str, int, int]] = []  # (path, version, calls in flight)
        self.active = 0
        self.most_active = 0

    @property
    def tokenizer(self):
        return None

    def generate(self, requests):
        raise AssertionError("a natively concurrent backend is served through generate_async")

    async def generate_async(self, request):
        key = request.prompt_ids[0]
        version = self.policy_version
        self.started.append((key, version))
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await self.gates.setdefault(key, trio.Event()).wait()
            if key < 0:
                raise ValueError(f"bad request {key}")
            return make_reply(request, version)
        finally:
            self.active -= 1

    def load_weights(self, path, version):
        self.loads.append((path, version, self.active))
        self.policy_version = version
