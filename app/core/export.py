"""Text that leaves the app: Markdown exports, code blocks, and the clipboard's file fallback."""

from __future__ import annotations

import re
import time
from pathlib import Path

from app.core.conversation import SAMPLING_FIELDS, ChatSettings, Conversation
from app.core.reply_parts import split_reply
from app.core.sanitize import strip_control
from app.core.versions import place

_FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)
ROLE_HEADINGS = {"user": "You", "assistant": "Assistant"}


def conversation_markdown(
    conversation: Conversation, model: str = "", exported_at: float | None = None
) -> str:
    """The conversation as a Markdown document: what produced it, then one section per message of
    the path shown (a reply the user stopped or its token limit cut says so in its heading, and a
    message with other versions which one it is).

    Without terminal controls: an export is read with `cat` and `less` as often as in an editor.
    """
    lines = [f"# {conversation.title or 'Conversation'}", ""]
    lines += provenance(conversation, model, time.time() if exported_at is None else exported_at)
    for message in conversation.messages:
        heading = ROLE_HEADINGS.get(message.role, message.role)
        heading += " (stopped)" if message.stopped else " (cut at its token limit)" if message.cut else ""
        if (shown := place(message)) is not None:
            heading += f" · version {shown[0]} of {shown[1]}"
        text = strip_control(message.content)
        body = reply_markdown(text) if message.role == "assistant" else text
        if message.role == "tool":  # a tool's output, as the model was sent it
            heading = f"Tool result · {strip_control(message.name)}"
            body = f"````text\n{text}\n````"
        lines += [f"## {heading}", "", body.rstrip(), ""]
    return "\n".join(lines)


def provenance(conversation: Conversation, model: str, exported_at: float) -> list[str]:
    """The header's lines: an answer means little without the model and sampling that gave it."""
    started, exported = (_utc(moment) for moment in (conversation.created_at, exported_at))
    lines = [f"- Model: {strip_control(model) or 'unknown'}"]
    lines += [
        f"- Sampling: {sampling_text(conversation.settings)}",
        f"- Started {started}, exported {exported}",
    ]
    if system := strip_control(conversation.settings.system_prompt):
        lines += ["", "> System: " + system.replace("\n", "\n> ")]
    return [*lines, ""]


def sampling_text(settings: ChatSettings) -> str:
    if settings.chosen != SAMPLING_FIELDS:  # a server's pane: the rest was the server's own
        return strip_control(settings.in_force(server=True))
    text = " · ".join(f"{name} {getattr(settings, name)}" for name in SAMPLING_FIELDS)
    return f"{text} ({strip_control(settings.preset)})" if settings.preset else text


def _utc(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(moment))


def reply_markdown(reply: str) -> str:
    """A reply as plain Markdown: thinking in a folded <details>, tool calls as `tool-call` code blocks."""
    out: list[str] = []
    for part in split_reply(reply):
        if part.kind == "thinking":
            out.append(f"<details><summary>Thinking</summary>\n\n{part.text.strip()}\n\n</details>\n\n")
        elif part.kind == "tool_call":
            out.append(f"\n```tool-call\n{part.text.strip()}\n```\n")
        else:
            out.append(part.text)
    return "".join(out)


def last_code_block(markdown: str) -> str | None:
    """The body of the last fenced code block, the thing a user most often wants to paste."""
    blocks = _FENCE.findall(markdown)
    return blocks[-1][1] if blocks else None


def write_text(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def export_name(conversation: Conversation) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    return f"conversation-{conversation.id or 'new'}-{stamp}.md"
