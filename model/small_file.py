"""A checkpoint's small files (config.json, tokenizer files, chat templates), read as untrusted.

A downloaded or hand-made checkpoint directory can hold anything under those names: a symlink to
/dev/zero (read until memory runs out), a FIFO (open and read hang forever), a file of gigabytes.
So each is opened without blocking, must be a regular file, and is read up to a limit; anything
else is a CheckpointError naming the file, one sentence.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from model.errors import CheckpointError

JSON_BYTES = 64 << 20  # config.json is ~1 KiB; the largest tokenizer.json we know is ~35 MiB


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at `path` (symlinks to one are fine), at most `limit` of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckpointError(f"{path} is not a regular file (a device, FIFO or folder): not read")
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise CheckpointError(f"{path} is larger than {limit >> 20} MiB: not a file of a checkpoint")
    return data
