"""The dashboard's figures for a server backend: what its metrics endpoint says, or that it says
nothing and what this client sees instead (its streams, those with no token yet, tok/s per pane)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from app.backend.server_metrics import NO_METRICS, NOT_REPORTED, ClientStream, ServerSnapshot
from app.ui.widgets.meter import meter

NOT_ANSWERING = "not answering: client-side figures"


def _known(value: object, form: str = "{}") -> str:
    return "?" if value is None else form.format(value)


def _heading(snap: ServerSnapshot) -> str:
    """Where the figures come from, or why there are none (the server's own words never appear)."""
    if not snap.answering:
        return NOT_ANSWERING
    if not snap.source:
        return snap.note or NO_METRICS
    skipped = snap.skipped_lines
    return f"{snap.source} · {skipped} bad line{'s' * (skipped != 1)} skipped" if skipped else snap.source


def client_line(snap: ServerSnapshot) -> str:
    """This client's own view: its open streams, and those with no token yet (the server's queue
    may not count them, or say nothing of a queue at all)."""
    waiting = snap.waiting_here
    line = f"client {snap.streams_open} stream{'s' * (snap.streams_open != 1)}"
    return f"{line} · {waiting} waiting for a first token" if waiting else line


def reported(snap: ServerSnapshot, figure: str) -> bool:
    return figure not in NOT_REPORTED.get(snap.source, ())


def figure_lines(snap: ServerSnapshot) -> list[Text]:
    """The server's figures it reports; the ones its kind never reports named after the last line."""
    batch = [f"{_known(snap.running)} running"]
    batch += [f"{_known(snap.waiting)} queued"] if reported(snap, "queue") else []
    batch += [f"{_known(snap.preemptions)} preempted"] if reported(snap, "preemptions") else []
    lines = [Text("batch  " + " · ".join(batch))]
    if reported(snap, "KV cache"):
        used = 0 if snap.kv_usage is None else round(snap.kv_usage * 100)
        kv = f" {_known(snap.kv_usage, '{:.0%}')} used"
        if reported(snap, "prefix hits"):
            kv += f" · prefix {_known(snap.prefix_hit_rate, '{:.0%}')} hit"
        lines.append(Text.assemble("kv     ", meter(used, 100), kv))
    if unsaid := NOT_REPORTED.get(snap.source):
        note = f"not reported: {', '.join(unsaid)}"
        if len(lines) == 1:  # only the batch line: the note has a line of its own
            lines.append(Text(note, style="dim"))
        else:  # the meters have four lines in all: the note ends the last figure's
            lines[-1].append(f" · {note}", style="dim")
    return lines


def server_lines(snap: ServerSnapshot) -> Text:
    """The meters block: the server's queue, KV cache and prefix cache, and this client's streams.

    Every figure was checked where it entered (server_metrics): one that cannot be true is "?";
    the figures a kind of server never reports are named in words instead.
    """
    lines = [Text(f"server · {_heading(snap)}", style="bold" if snap.source else "dim")]
    if snap.source:
        lines += figure_lines(snap)
    lines.append(Text(client_line(snap)))
    return Text("\n").join(lines)


def server_line(snap: ServerSnapshot) -> str:
    """The one-line form, for short terminals."""
    parts = [f"server {snap.tokens_per_s:.0f} tok/s" if snap.streams_open or snap.running else "server idle"]
    if snap.source:
        parts.append(f"{_known(snap.running)} running")
        parts += [f"{_known(snap.waiting)} queued"] if reported(snap, "queue") else []
        parts += [f"kv {_known(snap.kv_usage, '{:.0%}')}"] if reported(snap, "KV cache") else []
    else:
        parts.append(_heading(snap))
    parts.append(client_line(snap))
    return " · ".join(parts)


def pane_rows(snap: ServerSnapshot, labels: Mapping[object, str]) -> list[tuple[str, ...]]:
    """The table: this client's open streams by pane (a server does not say whose requests are whose)."""
    return [stream_cells(stream, labels) for stream in snap.streams]


def stream_cells(stream: ClientStream, labels: Mapping[object, str]) -> tuple[str, ...]:
    """One stream's row, in the dashboard's columns (pane, phase, tokens, tok/s)."""
    label = labels.get(stream.tag, str(stream.tag))
    tokens = f"{stream.tokens}/{stream.max_tokens}" if stream.max_tokens else str(stream.tokens)
    if not stream.started:
        return (label, "waiting", tokens, "")
    return (label, "streaming", tokens, f"{stream.tokens_per_s:.0f}")
