"""The Reasoning-Gym process: makes problems and scores answers, apart from the process that holds the model.

    python -m actors.reasoning_gym.worker        # started by actors/reasoning_gym/process.py, one per process

Reasoning-Gym is a trusted library, but several of its scorers `eval` the model's answer (spiral_matrix,
binary_matrix, n_queens, string_insertion) or hand it to sympy's `parse_expr` (countdown, puzzle24, the
integration tasks), and the sandbox (standard library only, no site-packages) cannot import it. So problems are
made and answers scored here: a child process with resource limits (address space, file size, no core dumps), in
a session of its own (killed whole on a timeout), with the sandbox's seccomp deny-list installed once the library
is loaded (no sockets, no new processes or threads, no signals to others, no file writes). A malicious answer can
at worst crash or hang this process: the client kills it, scores the answer 0 and starts a new one.

Protocol: one JSON object per line on stdin, one reply per line on the private copy of stdout (fd 1 itself points
at stderr, so a library's stray print cannot break a frame):
    {"op": "problem", "task": {ReasoningGymTask}}            -> {"ok": true, "question", "answer"}
    {"op": "score", "task": {...}, "answer": "..."}          -> {"ok": true, "score": 0.0..1.0}
    anything that fails                                       -> {"ok": false, "error": "..."}
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys

MEMORY_BYTES = 4 << 30
CACHE = 64


def _limits() -> None:
    for which, value in ((resource.RLIMIT_AS, MEMORY_BYTES), (resource.RLIMIT_FSIZE, 1 << 20), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


class Problems:
    """Datasets made from task descriptions, cached (a dataset is cheap to keep, some are slow to make)."""

    def __init__(self):
        import reasoning_gym.factory as factory

        self.factory = factory
        self.cache: dict[str, object] = {}

    def dataset(self, task: dict):
        key = json.dumps({k: task.get(k) for k in ("dataset", "params", "difficulty", "seed", "size")}, sort_keys=True)
        if key not in self.cache:
            if len(self.cache) >= CACHE:
                self.cache.pop(next(iter(self.cache)))
            self.cache[key] = self._make(task)
        return self.cache[key]

    def _make(self, task: dict):
        f = self.factory
        name, seed, size = task["dataset"], int(task.get("seed", 42)), int(task.get("size", 1))
        difficulty = int(task.get("difficulty", -1))
        if difficulty < 0 or not f.has_curriculum(name):
            return f.create_dataset(name, size=size, seed=seed, **(task.get("params") or {}))
        curriculum = f.create_curriculum(name)
        for attr_name, attr in curriculum.attributes.items():
            curriculum.set_attr_level(attr_name, min(difficulty, len(attr.levels) - 1))
        config = curriculum.generate_configuration({"seed": seed, "size": size})
        if hasattr(config, "validate"):
            config.validate()
        dataset_cls, _ = f.DATASETS[name]
        return dataset_cls(config=config)

    def entry(self, task: dict):
        dataset = self.dataset(task)
        return dataset, dataset[int(task.get("index", 0)) % len(dataset)]


def _as_text(value) -> str | None:
    return None if value is None else str(value)


def handle(problems: Problems, request: dict) -> dict:
    op = request.get("op")
    task = request.get("task") or {}
    dataset, entry = problems.entry(task)
    if op == "problem":
        return {"ok": True, "question": str(entry["question"]), "answer": _as_text(entry.get("answer"))}
    if op == "score":
        score = dataset.score_answer(request.get("answer"), entry)
        score = float(score) if isinstance(score, (int, float)) and math.isfinite(score) else 0.0
        return {"ok": True, "score": max(0.0, min(1.0, score))}
    return {"ok": False, "error": f"unknown op {op!r}"}


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints of the library go to stderr
    sys.stdout = sys.stderr
    _limits()
    problems = Problems()
    # Warm up what scoring loads lazily (sympy's parser), before the filter refuses new files and threads.
    from sympy.parsing.sympy_parser import parse_expr

    parse_expr("1 + 2")
    seccomp = ""
    if os.environ.get("SPADE_RG_SECCOMP", "1") != "0":
        from actors.sandbox.seccomp import install_seccomp

        seccomp = install_seccomp(general=True, host_state=True, file_writes=True) or "on"
    out.write(json.dumps({"ok": True, "ready": True, "seccomp": seccomp}) + "\n")
    for line in sys.stdin:
        try:
            reply = handle(problems, json.loads(line))
        except Exception as exc:  # noqa: BLE001 (anything a dataset or a scorer raises is the answer's problem)
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        out.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
