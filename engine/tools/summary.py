"""The end-of-run summary: what the run directory holds, read back from LMDB and metrics.jsonl."""

from __future__ import annotations

from collections import Counter

from engine.protocol.metrics_file import read_rows
from engine.protocol.paths import RunPaths


def collect_summary(paths: RunPaths) -> dict:
    from storage.scan import describe_skipped, tolerant
    from storage.store import Store

    summary: dict = {"run_dir": str(paths.root)}
    if not (paths.store / "data.mdb").exists():
        return summary
    store = Store.open(paths.store, readonly=True)
    skipped: list = []  # records that do not decode: counted and named, the rest is summarised
    try:
        envs = Counter()
        for env in tolerant(store, "environments", skipped):
            envs["seed" if env.source == "seed" else ("valid" if env.valid else "rejected")] += 1
        trajectories = Counter((t.role, t.arm) for t in tolerant(store, "trajectories", skipped))
        summary["environments"] = dict(envs)
        summary["trajectories"] = {f"{role}/{arm}": n for (role, arm), n in sorted(trajectories.items())}
        summary["designer_rewards"] = sum(1 for _ in tolerant(store, "designer_rewards", skipped))
        state = store.state()
        summary["state"] = {"steps_done": state.steps_done, "policy_version": state.policy_version, "finished": state.finished}
    finally:
        store.close()
    summary["skipped"] = describe_skipped(skipped)
    if paths.metrics.exists():
        lines = read_rows(paths.metrics)
        summary["updates"] = sum(1 for x in lines if "eval" not in x)  # eval rows (engine/evaluation.py) are no updates
    latest = paths.checkpoints / "latest"
    if latest.exists():
        summary["checkpoint"] = str(latest.resolve())
    return summary


def print_summary(paths: RunPaths) -> None:
    s = collect_summary(paths)
    print(f"\nrun directory: {s['run_dir']}")
    if "environments" in s:
        e = s["environments"]
        print(f"  environments: {e.get('valid', 0)} valid, {e.get('rejected', 0)} rejected, {e.get('seed', 0)} seeds")
        print("  trajectories: " + ", ".join(f"{k} {v}" for k, v in s["trajectories"].items()))
        print(f"  designer rewards: {s['designer_rewards']}; steps done: {s['state']['steps_done']}; policy version: {s['state']['policy_version']}")
    for line in s.get("skipped", []):
        print(f"  {line}")
    if "updates" in s:
        print(f"  metrics: {s['updates']} updates in {paths.metrics}")
    if "checkpoint" in s:
        print(f"  checkpoint: {s['checkpoint']}")
    if "environments" in s:
        from engine.tools.report import write_report

        try:
            print(f"  report: {write_report(paths)}")
        except OSError as exc:  # a full disk or a read-only folder: the run itself is fine
            print(f"  report: not written ({exc.strerror or exc}); write it later with `bin/spade-engine report {paths.root} --out FILE`")
