"""`bin/spade-engine inspect RUN_DIR`: a run's environments and trajectories, read from LMDB (read-only).

    inspect RUN_DIR [--skill S] [--step N] [--verdict valid|rejected] [--source designed|seed] [--sort regret --desc]
    inspect RUN_DIR --env ID            its code, hint, passage, validation report, plays and designer reward
    inspect RUN_DIR --trajectory KEY    one play (or design) as a transcript: observations, the agent's turns, the
                                        parsed actions, rewards and policy versions (KEY: STEP/SAMPLE_ID or SAMPLE_ID)

Transcripts decode the stored token ids with the run's tokenizer (its model folder's tokenizer.json, read by the
`tokenizers` package, never transformers); without one they show the stored turns only. Named `inspector` so that
it never shadows the standard library's `inspect`.
"""

from __future__ import annotations

import sys

from engine.tools.env_table import SORT_KEYS, EnvRow, environment_rows, sort_rows
from engine.protocol.errors import InputError, UsageError
from engine.protocol.paths import RunPaths
from engine.tools.replay import open_store, report_skipped
from engine.metrics.observations import load_tokenizer
from engine.tools.transcript import chat_turns, decode_parts
from storage.scan import tolerant, tolerant_get
from storage.store import trajectory_key


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def list_lines(rows: list[EnvRow]) -> list[str]:
    w = max([16] + [len(r.env_id) for r in rows])
    p = max([6] + [len(r.parent) for r in rows])
    lines = [f"{'env':<{w}} {'skill':<24} {'step':>4} {'parent':<{p}} {'verdict':<28} {'win(no hint)':>12} {'win(hint)':>9} {'regret':>7} {'reward':>7}"]
    for r in rows:
        lines.append(
            f"{r.env_id:<{w}} {r.skill[:24]:<24} {r.step:>4} {r.parent or '-':<{p}} {r.verdict[:28]:<28} "
            f"{_num(r.win.get('no_hint')):>12} {_num(r.win.get('hint')):>9} {_num(r.regret, '+.2f'):>7} {_num(r.designer_reward, '.3f'):>7}"
        )
    return lines


def environment_lines(store, paths: RunPaths, env_id: str, skipped: list) -> list[str]:
    env = tolerant_get(store, "environments", env_id, skipped)
    if env is None:
        raise InputError(f"no environment {env_id!r} in {paths.store} (list them with `inspect {paths.root}`)")
    lines = [f"environment {env.env_id}  skill {env.skill}  made at step {env.step_created}  source {env.source}  attempt {env.attempt}"]
    row = next((r for r in environment_rows(store, skipped) if r.env_id == env_id), None)
    if row is not None:
        lines.append(f"verdict {row.verdict}" + (f"  parent {row.parent}" if row.parent else "")
                     + f"  win rate {_num(row.win['no_hint'])} without hint ({row.plays['no_hint']} plays), "
                     f"{_num(row.win['hint'])} with ({row.plays['hint']})  regret {_num(row.regret, '+.3f')}  designer reward {_num(row.designer_reward, '.3f')}")
    lines += ["", "hint:", f"    {env.hint or '(none)'}", "", f"passage {env.passage_id or '(none)'}:"]
    lines += [f"    {line}" for line in _passage(paths, env.passage_id).splitlines()] or ["    (not in the corpus)"]
    lines += ["", "validation report:" + ("" if env.checks else f" {env.reason or '(no checks recorded)'}")]
    lines += [f"    {'pass' if passed else 'FAIL'}  {name}: {detail}" for name, passed, detail in env.checks]
    lines += ["", "code:"] + [f"    {line}" for line in (env.code or "(no code extracted)").splitlines()]
    plays = [t for t in tolerant(store, "trajectories", skipped) if t.env_id == env_id]
    if plays:
        lines += ["", "trajectories (show one with --trajectory KEY):"]
        lines += [f"    {trajectory_key(t.step, t.sample_id)}  {t.role} {t.arm} {t.status} return {t.episode_return:+.2f}" for t in plays]
    return lines


def _passage(paths: RunPaths, passage_id: str) -> str:
    if not passage_id:
        return ""
    from engine.protocol.config_loading import ConfigError, read_config_file
    from engine.curriculum import load_corpus

    try:
        corpus = read_config_file(paths.config).curriculum.corpus
        passages = load_corpus(corpus or None)
    except (ConfigError, InputError, OSError):
        return ""
    return next((p.text for p in passages if p.passage_id == passage_id), "")


def find_trajectory(store, key: str, skipped: list):
    if "/" in key:
        return tolerant_get(store, "trajectories", key, skipped)
    return next((t for t in tolerant(store, "trajectories", skipped) if t.sample_id == key), None)


def transcript_lines(t, tokenizer) -> list[str]:
    """A trajectory as readable text: each context turn (system, the observation), each sampled reply with the
    action parsed from it, its reward and the policy versions that sampled it."""
    lines = [f"trajectory {trajectory_key(t.step, t.sample_id)}  {t.role} {t.arm}  env {t.env_id} ({t.skill})  seed {t.seed}  "
             f"status {t.status}  return {t.episode_return:+.2f}"]
    if t.failure:
        lines.append(f"failure: {t.failure}")
    if tokenizer is None:
        lines.append("(no tokenizer.json in the run's model folder: the stored turns only)")
        for i, turn in enumerate(t.turns, 1):
            lines.append(f"turn {i}: action {turn.action!r} ({turn.parse_rule})  reward {turn.reward:+.2f}  v{turn.policy_version}")
        return lines
    replies = 0
    for part in decode_parts(t.sample, tokenizer):
        if part.kind == "context":
            for role, content in chat_turns(part.text):
                if content.strip():
                    label = "observation" if role in ("user", "tool") and replies else role
                    lines += [f"--- {label}", content.rstrip()]
            continue
        lines += [f"--- {t.role} turn {replies + 1} (policy v{', v'.join(map(str, part.versions)) or '?'})", part.text.rstrip()]
        if replies < len(t.turns):
            turn = t.turns[replies]
            ended = "terminated" if turn.terminated else "truncated" if turn.truncated else ""
            lines.append(f"    => action {turn.action!r} ({turn.parse_rule})  reward {turn.reward:+.2f}" + (f"  {ended}" if ended else ""))
        replies += 1
    return lines


def inspect_main(paths: RunPaths, args) -> int:
    if args.env and args.trajectory:
        raise UsageError("give --env or --trajectory, not both")
    if args.sort not in SORT_KEYS:
        raise UsageError(f"--sort {args.sort}: choose one of {', '.join(SORT_KEYS)}")
    skipped: list = []
    store = open_store(paths, skipped)
    try:
        if args.env:
            lines = environment_lines(store, paths, args.env, skipped)
        elif args.trajectory:
            t = find_trajectory(store, args.trajectory, skipped)
            if t is None:
                raise InputError(f"no trajectory {args.trajectory!r} in {paths.store} (see `inspect {paths.root} --env ID` for an environment's)")
            lines = transcript_lines(t, load_tokenizer(paths.read_model_path() if paths.meta.exists() else None))
        else:
            rows = [r for r in environment_rows(store, skipped)
                    if (not args.skill or r.skill == args.skill) and (args.step is None or r.step == args.step)
                    and (args.verdict == "all" or (r.valid if args.verdict == "valid" else not r.valid))
                    and (args.source == "all" or r.source == args.source)]
            rows = sort_rows(rows, args.sort, args.desc)[: args.limit or None]
            if not rows:
                raise InputError(f"no environment in {paths.store} matches these filters")
            lines = list_lines(rows)
    finally:
        store.close()
    sys.stdout.write("\n".join(lines) + "\n")
    report_skipped(skipped, paths)
    return 0
