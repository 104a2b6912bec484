"""Entry points behind the engine's `validate` and `play` subcommands (the engine's CLI parses the arguments).

    validate_main("env.py", as_json=False)      # prints every check; 0 valid, 1 invalid
    play_main("env.py", seed=3, hint=None, actions=["\\boxed{1}"])   # plays in the sandbox, printing each turn

Both run the environment in a sandbox pool at the strongest isolation this machine has (`isolation` forces a
level, as `open_sandbox_pool` takes it); `play` runs no static check first, so the sandbox alone contains it. A
sandbox that cannot start raises `SandboxUnavailable` (a `RunFailed`, possibly inside trio's exception group):
engine/cli.py reports it as one line and exit 1, as every failure (engine/protocol/errors.py `describe_failure`).
"""

import sys
from pathlib import Path

import msgspec
import trio

from actors.sandbox.pool import EpisodeFailed, open_sandbox_pool
from actors.settings import validate_environment


def validate_main(path: str, as_json: bool, *, isolation: str = "auto") -> int:
    source = Path(path).read_text()  # FileNotFoundError for a missing file, as the caller expects

    async def run() -> tuple[object, str]:
        async with open_sandbox_pool(workers=2, isolation=isolation) as pool:
            return await validate_environment(pool, source), str(pool.isolation)

    verdict, isolation = trio.run(run)
    if as_json:
        print(msgspec.json.encode({"valid": verdict.valid, "reason": verdict.reason,
                                   "checks": [msgspec.structs.asdict(c) for c in verdict.checks]}).decode())
    else:
        print(f"{path}: {'VALID' if verdict.valid else 'INVALID'} ({verdict.class_name or 'no Env class'}; "
              f"sandbox {isolation})")
        for check in verdict.checks:
            print(f"  [{'pass' if check.passed else 'FAIL'}] {check.name}: {check.detail}")
        if not verdict.valid:
            print(f"reason: {verdict.reason}")
    return 0 if verdict.valid else 1


def _read_action() -> str | None:
    print("action> ", end="", flush=True)
    line = sys.stdin.readline()
    return line.rstrip("\n") if line else None


def play_main(path: str, seed: int | None, hint: str | None, actions: list[str], *,
              isolation: str = "auto") -> int:
    """Play one episode; actions from the list, else one per line from stdin until the end or EOF."""
    source = Path(path).read_text()

    async def run() -> int:
        async with open_sandbox_pool(workers=1, isolation=isolation) as pool:
            print(f"sandbox: {pool.isolation} ({pool.isolation_detail})", file=sys.stderr, flush=True)
            try:
                async with pool.open_episode(source) as episode:
                    observation, _ = await episode.reset(seed=seed)
                    print(f"{observation}\n\nHINT: {hint}" if hint else observation, flush=True)
                    pending = iter(actions) if actions else None
                    while True:
                        action = next(pending, None) if pending is not None else \
                            await trio.to_thread.run_sync(_read_action, abandon_on_cancel=True)
                        if action is None:
                            return 0
                        result = await episode.step(action)
                        print(f"{result.observation}\nreward={result.reward} terminated={result.terminated} "
                              f"truncated={result.truncated}", flush=True)
                        if result.terminated or result.truncated:
                            return 0
            except EpisodeFailed as failure:
                print(f"the environment failed ({failure.kind}): {failure.detail}", file=sys.stderr)
                return 1

    return trio.run(run)
