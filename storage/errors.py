"""The store's errors: each a one-line message naming the file and the fix (see storage/store.py)."""

from __future__ import annotations

from engine.protocol.errors import InputError, RunFailed

FIX = "restore it from a backup or start a new run"


class StoreFullError(RunFailed):
    """The disk under the store (or its map) is full; nothing of the failed transaction was written."""


class StoreCorrupt(InputError):
    """The store's data file is damaged: empty, truncated, scrambled header or b-tree pages."""


class StoreMissing(InputError, FileNotFoundError):
    """A read-only open of a folder that holds no store."""


class StoreAccessError(InputError):
    """The store's folder or files cannot be opened by this user, or cannot be read safely right now."""
