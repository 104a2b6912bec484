"""Optional experiment trackers: each metrics.jsonl row also to TensorBoard and / or Weights & Biases.

    log_to_trackers(config, paths, row)      # engine/run.py, as each update's row is written; a no-op by default
    close_trackers()                          # at exit (registered on first use)

Off by default (`run.tensorboard`, `run.wandb`); each package is imported only when its switch is on, and a missing
one is a note on stderr, once, not a failure. Nothing touches the network: TensorBoard writes event files to
RUN_DIR/tensorboard (tensorboardX: no torch, no TensorFlow), W&B runs in offline mode under RUN_DIR/wandb
(`wandb sync` uploads it later). Asynchronous updates give two axes: every scalar is logged against the step that
made the batch (`by_step/...`) and against the policy version the update produced (`by_version/...`); W&B gets
`step` and `policy_version` as custom step metrics instead of its own monotonic counter.
Nested values (learner metrics, win rate by skill, rejection reasons) are flattened to `a/b` keys; text is skipped.
"""

from __future__ import annotations

import atexit
import os
import sys

from engine.protocol.paths import RunPaths

_OPEN: dict[str, list] = {}


def scalars(row: dict, prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics row, nested dicts flattened with `/` (booleans as 0 / 1; text, lists and the wall-clock `time` left out)."""
    out: dict[str, float] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, (bool, int, float)) and key != "time":
            out[name] = float(value)
    return out


class _TensorBoard:
    def __init__(self, paths: RunPaths):
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=str(paths.root / "tensorboard"))

    def log(self, values: dict[str, float], step: int, version: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"by_step/{key}", value, step)
            self.writer.add_scalar(f"by_version/{key}", value, version)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _WandB:
    def __init__(self, paths: RunPaths, config):
        import msgspec
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        self.run = wandb.init(
            project="spade-engine", name=paths.root.name, dir=str(paths.root), mode="offline",
            config=msgspec.to_builtins(config), reinit=True,
        )
        self.run.define_metric("step")
        self.run.define_metric("policy_version")
        self.run.define_metric("by_step/*", step_metric="step")
        self.run.define_metric("by_version/*", step_metric="policy_version")

    def log(self, values: dict[str, float], step: int, version: int) -> None:
        self.run.log({"step": step, "policy_version": version, **{f"by_step/{k}": v for k, v in values.items()},
                      **{f"by_version/{k}": v for k, v in values.items()}})

    def close(self) -> None:
        self.run.finish()


def _open(config, paths: RunPaths) -> list:
    trackers = []
    for enabled, kind, package in ((config.run.tensorboard, _TensorBoard, "tensorboardX"), (config.run.wandb, _WandB, "wandb")):
        if not enabled:
            continue
        try:
            trackers.append(kind(paths) if kind is _TensorBoard else kind(paths, config))
        except ImportError:
            print(f"note: run.{'tensorboard' if kind is _TensorBoard else 'wandb'} is on but {package} is not installed "
                  f"(pip install {package}): not logging to it", file=sys.stderr)
    return trackers


def log_to_trackers(config, paths: RunPaths, row: dict) -> None:
    """Log one metrics row to the trackers the config turns on (opened on first use)."""
    if not (config.run.tensorboard or config.run.wandb):
        return
    key = str(paths.root)
    if key not in _OPEN:
        if not _OPEN:
            atexit.register(close_trackers)
        _OPEN[key] = _open(config, paths)
    values = scalars(row)
    step, version = int(row.get("step", 0)), int(row.get("policy_version", 0))
    for tracker in _OPEN[key]:
        tracker.log(values, step, version)


def close_trackers() -> None:
    for trackers in _OPEN.values():
        for tracker in trackers:
            tracker.close()
    _OPEN.clear()
