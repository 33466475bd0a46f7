"""The database file on disk, apart from what is in it: the flock that keeps a second lfm-chat
out, writability, the file's identity, moving a corrupt file aside, and why it cannot be used.

SQLite keeps `<path>-wal` and `<path>-shm` beside the file; they belong to it, so they are
checked and moved with it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from app.core.options import DATA_DIR_ENV
from app.store.errors import StoreError, StoreLockedError

try:
    import fcntl
except ImportError:  # Windows: no flock, so nothing stops two instances sharing a data dir there
    fcntl = None  # type: ignore[assignment]


def check_writable(path: Path) -> None:
    """Refuse a read-only dir or file before SQLite opens it: a read-only open leaves a read-only
    -shm file behind, which would keep the store unwritable after the user fixed the permissions."""
    for item in (path.parent, path, *_companions(path)):
        if item.exists() and not os.access(item, os.W_OK):
            raise PermissionError(errno.EACCES, "read-only", str(item))


def _companions(path: Path) -> tuple[Path, Path]:
    """The WAL and shared-memory files that belong with the database file."""
    return path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def identity(stat: os.stat_result) -> tuple[int, int]:
    """Which file this is, to notice one deleted or replaced under an open connection."""
    return stat.st_dev, stat.st_ino


def lock(path: Path) -> int | None:
    """Hold an exclusive flock on `path` and write our pid in it. The OS drops the lock when the
    process ends, however it ends (SIGKILL too), so a stale lock file never blocks a launch.

    The pid is written over the file's contents, so `path` must be our own plain file: a symlink
    planted there would have us overwrite its target, a FIFO would hang the launch."""
    if fcntl is None:
        return None
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(_not_plain(path, "a symbolic link")) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(_not_plain(path, "not a regular file"))
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BlockingIOError:
        holder = os.pread(fd, 32, 0)
        os.close(fd)
        raise StoreLockedError(_locked(path, holder)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def holds(fd: int | None, path: Path) -> bool:
    """Whether our lock fd is still the file at `path` (it is not once the dir was deleted)."""
    try:
        return fd is None or os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _not_plain(path: Path, what: str) -> str:
    return (
        f"The lock file {path} is {what}, which lfm-chat will not write to; "
        "remove it, or start with --data-dir OTHER_DIR."
    )


def _locked(path: Path, holder: bytes) -> str:
    pid = holder.decode("ascii", "replace").strip()
    who = f"Another lfm-chat (pid {pid})" if pid.isdigit() else "Another lfm-chat"
    return f"{who} is using {path.parent}. Quit it first, or start this one with --data-dir OTHER_DIR."


def move_aside(path: Path) -> Path:
    """Rename a corrupt file (and its -wal/-shm, which belong to it) to a free `.corrupt-TIME` name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{number}")
    for side, moved in zip(_companions(path), _companions(target), strict=True):
        if side.exists():
            side.rename(moved)
    path.rename(target)
    return target


def open_failed(exc: BaseException, path: Path) -> str:
    return (
        f"Cannot open the conversation store {path}: {cause(exc, path)}. "
        f"To use another folder, start with --data-dir DIR or set {DATA_DIR_ENV}."
    )


def cause(exc: BaseException, path: Path) -> str:
    """What went wrong in the user's terms, with what to do about it."""
    folder = path.parent
    text = str(exc)
    if isinstance(exc, (NotADirectoryError, FileExistsError)) or (folder.exists() and not folder.is_dir()):
        return f"{folder} or a folder above it is a file, not a folder"
    if not folder.exists():
        return f"the folder {folder} no longer exists; create it again (mkdir -p {folder})"
    if isinstance(exc, PermissionError) and exc.filename:
        return f"{exc.filename} is read-only; make it writable"
    if isinstance(exc, PermissionError) or "readonly" in text or "read-only" in text:
        return f"{folder} or the files in it are read-only; make them writable"
    if "disk is full" in text or "No space left" in text:
        return "the disk is full; free some space"
    if "locked" in text:
        return "another program holds the database locked; close it"
    return text
