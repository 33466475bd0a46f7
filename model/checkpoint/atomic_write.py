"""Writing a cache file so that no reader ever sees half of it, even with two writers at once."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

TEMPORARY_PREFIX = ".tmp-"
ABANDONED_AFTER_S = 24 * 3600  # a temporary this old belongs to a writer that died


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``target``; when the block succeeds, it becomes ``target``.

    The rename is atomic: readers see the old file or the new one. Two writers each write their
    own temporary and the last rename wins, a whole file either way. On failure the temporary
    is removed.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, suffix=target.suffix, dir=target.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def remove_abandoned(directory: Path) -> None:
    """Delete temporaries left by writers that were killed mid-write (a day old: never a live one)."""
    cutoff = time.time() - ABANDONED_AFTER_S
    for path in directory.glob(f"{TEMPORARY_PREFIX}*"):
        with contextlib.suppress(OSError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
