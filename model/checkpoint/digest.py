"""A checkpoint's content digest, cheap after the first time: what the quantized-weights cache is keyed by.

A Hugging Face Hub snapshot's weight files are symlinks to ``blobs/<sha256 of the content>``
(LFS files are named by their hash), so their digest is the blob's name. Any other file is
hashed once with sha256 (about a second for 700 MB) and the result remembered beside its
``stat`` signature: size, mtime, ctime, inode and device. Writing or replacing the file changes
that signature (ctime cannot be set back from user space), so a remembered digest is reused
only for the very file it was computed from, and every later launch pays one ``stat``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

from model.checkpoint.atomic_write import replacing
from model.checkpoint.weights import safetensors_files

logger = logging.getLogger(__name__)

_HUB_BLOB = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 24


def checkpoint_digest(checkpoint_dir: Path, memo_dir: Path) -> str:
    """sha256 over config.json's bytes and the content digest of every weight file, by name."""
    digest = hashlib.sha256((checkpoint_dir / "config.json").read_bytes())
    for path in safetensors_files(checkpoint_dir):
        digest.update(f"\0{path.name}\0{file_digest(path, memo_dir)}".encode())
    return digest.hexdigest()


def file_digest(path: Path, memo_dir: Path) -> str:
    """The sha256 of ``path``'s content: a Hub blob's name, a remembered digest, or hashed now."""
    resolved = path.resolve()
    if resolved.parent.name == "blobs" and _HUB_BLOB.fullmatch(resolved.name):
        return resolved.name
    stat = resolved.stat()
    signature = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]
    memo = memo_dir / f"{hashlib.sha256(str(resolved).encode()).hexdigest()[:32]}.json"
    try:
        remembered = json.loads(memo.read_text(encoding="utf-8"))
        if remembered["signature"] == signature and _HUB_BLOB.fullmatch(remembered["sha256"]):
            return remembered["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable: hash again
    content = _sha256(resolved)
    _remember(memo, {"path": str(resolved), "signature": signature, "sha256": content})
    return content


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as file:
        while size := file.readinto(buffer):
            digest.update(view[:size])
    return digest.hexdigest()


def _remember(memo: Path, record: dict) -> None:
    """Best effort (a lost memo only costs a rehash), atomic since two launches may write it at once."""
    try:
        with replacing(memo) as temporary:
            temporary.write_text(json.dumps(record), encoding="utf-8")
    except OSError as exc:
        logger.info("could not remember the digest of %s: %s", record["path"], exc)
