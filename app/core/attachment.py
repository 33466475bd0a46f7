"""Text attached to a message: a file (`/file PATH`, the attach key), a huge paste, or what is piped
into `lfm-chat -p`. All of it is untrusted, and this is the one place it enters: read at most
ATTACHMENT_LIMIT_BYTES, refused when it is not UTF-8 text, stripped of terminal controls.

An attachment goes into the message as a fenced block headed by its name, so the model sees where
the text came from and where it ends.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.core.sanitize import strip_control

ATTACHMENT_LIMIT_BYTES = 1024 * 1024
"""The most bytes of one attachment read: 1 MiB is ~250k tokens, beyond any context lfm-chat runs,
so nothing that could fit is refused, and a 10 GB file or an endless pipe costs 1 MiB of memory."""


class AttachmentError(Exception):
    """Why a file or piped text was not attached: one sentence for the user."""


@dataclass(frozen=True, slots=True)
class Attachment:
    name: str  # one line, no controls: shown in notices and heading the block
    text: str  # cleaned: UTF-8 text without terminal controls

    def block(self) -> str:
        """The name, then the text fenced by more backticks than any run inside it."""
        longest = max((len(run) for run in re.findall(r"`+", self.text)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"{self.name}\n{fence}\n{self.text.rstrip(chr(10))}\n{fence}"

    @property
    def size(self) -> str:
        """Its size for a notice: 12.3 KB."""
        return f"{len(self.text.encode()) / 1e3:.1f} KB"


def display_name(name: str) -> str:
    """A file name on one line, without controls: a name may hold ESC or newlines."""
    return " ".join(strip_control(name).split()) or "file"


def from_bytes(name: str, data: bytes) -> Attachment:
    """`data` (at most ATTACHMENT_LIMIT_BYTES + 1 bytes read) as an attachment, or AttachmentError."""
    name = display_name(name)
    if len(data) > ATTACHMENT_LIMIT_BYTES:
        raise AttachmentError(f"{name} is larger than {ATTACHMENT_LIMIT_BYTES >> 20} MiB: not attached.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if "\0" in text:
        raise AttachmentError(f"{name} is not UTF-8 text (a binary file?): not attached.")
    return from_text(name, text)


def from_text(name: str, text: str) -> Attachment:
    """Text already decoded (a paste) as an attachment: newlines made \\n, controls stripped."""
    return Attachment(display_name(name), strip_control(text.replace("\r\n", "\n").replace("\r", "\n")))


def read_stream(stream: BinaryIO, name: str) -> Attachment:
    """Piped input, read only up to the cap (an endless pipe ends the read there)."""
    return from_bytes(name, stream.read(ATTACHMENT_LIMIT_BYTES + 1))


def read_file(path_text: str) -> Attachment:
    """The file at `path_text` (~ expanded); AttachmentError says what is wrong with the path."""
    path = Path(path_text.strip()).expanduser()
    shown = display_name(path_text.strip())
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise AttachmentError(f"{shown} is a directory, not a file: not attached.")
        if not stat.S_ISREG(mode):  # a FIFO or a device could block the read or never end
            raise AttachmentError(f"{shown} is not a regular file: not attached.")
        with path.open("rb") as file:
            data = file.read(ATTACHMENT_LIMIT_BYTES + 1)
    except FileNotFoundError:
        raise AttachmentError(f"No such file: {shown}.") from None
    except PermissionError:
        raise AttachmentError(f"{shown} cannot be read: permission denied.") from None
    except OSError as exc:
        raise AttachmentError(f"{shown} cannot be read: {exc.strerror or exc}.") from None
    return from_bytes(path.name, data)


def with_attachments(text: str, attachments: Sequence[Attachment]) -> str:
    """The message the model gets: each attachment's block, then what the user typed."""
    return "\n\n".join([*(a.block() for a in attachments), *([text] if text.strip() else [])])


def fit_refusal(name: str, tokens: int, left: int, where: str) -> str | None:
    """Why an attachment of `tokens` cannot go where only `left` tokens remain, with the figures."""
    if tokens <= left:
        return None
    return f"{name} is {tokens:,} tokens; {where} has {max(left, 0):,} left: not attached."


def file_command(text: str) -> str | None:
    """The PATH of a `/file PATH` message ("" for `/file` alone), None for any other message."""
    match = re.fullmatch(r"/file(?:\s+(.*))?", text.strip(), re.DOTALL)
    return None if match is None else (match[1] or "").strip()
