"""`bin/spade-engine replay RUN_DIR`: print stored trajectories (and environments) of a run, read from LMDB.

Works while the run is going (LMDB readers never block the writer) and after it has ended.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import InputError, UsageError
from engine.paths import RunPaths


def replay_main(args) -> int:
    from storage.store import Store

    paths = RunPaths(args.run_dir)
    try:
        store = Store.open(paths.store, readonly=True)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    tokenizer = None
    if args.tokens:
        from tokenizers import (
            Tokenizer,  # the fast tokenizer alone: the engine's commands never load torch
        )

        tokenizer_file = Path(paths.read_model_path()) / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise UsageError(f"--tokens needs the run's tokenizer, and {tokenizer_file} does not exist")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    shown = 0
    try:
        for t in store.trajectories(args.step):
            if (args.role and t.role != args.role) or (args.env and t.env_id != args.env):
                continue
            print(f"step {t.step} {t.role:8s} {t.arm:7s} env {t.env_id} status {t.status} return {t.episode_return:+.2f} tokens {len(t.sample.tokens) // 4}")
            for i, turn in enumerate(t.turns):
                print(f"    turn {i + 1}: action {turn.action[:80]!r} ({turn.parse_rule}) reward {turn.reward:+.2f} v{turn.policy_version}")
            if t.failure:
                print(f"    failure: {t.failure[:200]}")
            if tokenizer is not None:
                from engine.messages import unpack_ints

                print("    text: " + tokenizer.decode(unpack_ints(t.sample.tokens).tolist(), skip_special_tokens=False)[-2000:].replace("\n", "\n          "))
            shown += 1
            if shown >= args.limit:
                break
    finally:
        store.close()
    if shown == 0:
        raise InputError(f"no trajectories match {_filters(args)} in {paths.store}{_steps_note(paths)}")
    return 0


def _filters(args) -> str:
    given = [f"--step {args.step}" if args.step is not None else "", f"--role {args.role}" if args.role else "", f"--env {args.env}" if args.env else ""]
    return " ".join(g for g in given if g) or "(no filter)"


def _steps_note(paths: RunPaths) -> str:
    from storage.store import Store

    store = Store.open(paths.store, readonly=True)
    try:
        done = store.state().steps_done
    finally:
        store.close()
    return f" (it holds steps 0 to {done - 1})" if done else " (it holds no step yet)"
