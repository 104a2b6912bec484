"""File digests as the wire carries them: `PolicyFile.sha256` (engine/protocol/messages.py) is `sha256_file` of
the file, computed by the engine that serves a policy version (engine/peers/policy_transfer.py) and checked by the
worker that fetches it (actors/remote.py). Part of the shared protocol layer: it imports nothing of ours."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """The file's SHA-256, hex, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
