"""Copying and exporting from a pane, each reported in a toast: the clipboard (OSC 52, with a file
copy because OSC 52 cannot report success) and Markdown exports."""

from __future__ import annotations

from pathlib import Path

from textual.widget import Widget

from app.core.conversation import Conversation
from app.core.export import conversation_markdown, export_name, write_text


def copy_out(widget: Widget, files_dir: Path, text: str | None, what: str, missing: str) -> None:
    """Put `text` on the clipboard and in files_dir/clipboard.txt; `missing` is said when there is none."""
    if not text:
        widget.notify(missing, severity="warning")
        return
    widget.app.copy_to_clipboard(text)
    try:
        where = f"; also saved to {write_text(files_dir, 'clipboard.txt', text)}"
    except OSError:
        where = ""
    widget.notify(f"Copied {what} (if your terminal allows OSC 52){where}", title="Copy", markup=False)


def export_out(widget: Widget, files_dir: Path, conversation: Conversation, model: str) -> None:
    """Write the conversation as Markdown under files_dir/exports and say where (or why not)."""
    try:
        markdown = conversation_markdown(conversation, model)
        path = write_text(files_dir / "exports", export_name(conversation), markdown)
    except OSError as exc:
        widget.notify(f"Could not export: {exc.strerror or exc}", severity="error", markup=False)
        return
    widget.notify(f"Exported to {path}", title="Export", markup=False)
