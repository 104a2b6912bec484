"""The probe's seed games (the easy and medium seeds of engine/protocol/data/seeds), loaded in-process: they are
this repository's own data, so tests may run them without the sandbox to read their state."""

import importlib.util
import json

from engine.protocol.paths import SEEDS_DIR

PROBE_LEVELS = ("easy", "medium")  # bin/benchmarks/learning.py's probe


def probe_seed_files() -> list[str]:
    manifest = json.loads((SEEDS_DIR / "manifest.json").read_text())
    return sorted(e["file"] for e in manifest if e.get("level") in PROBE_LEVELS)


def seed_env_class(file: str):
    spec = importlib.util.spec_from_file_location(file.removesuffix(".py"), SEEDS_DIR / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return next(v for k, v in vars(module).items() if k.endswith("Env") and isinstance(v, type))


def probe_seed_games() -> dict:
    """file -> its environment class, for every probe seed."""
    return {file: seed_env_class(file) for file in probe_seed_files()}
