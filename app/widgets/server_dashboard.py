"""The dashboard's figures for a server backend: what its metrics endpoint says, or that it says
nothing and what this client sees instead (streams open, tok/s per pane)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from app.backend.server_metrics import NO_METRICS, ServerSnapshot
from app.widgets.meter import meter

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


def server_lines(snap: ServerSnapshot) -> Text:
    """The meters block: the server's queue, KV cache and prefix cache, and this client's streams.

    Every figure was checked where it entered (server_metrics): None is shown as "?".
    """
    lines = [Text(f"server · {_heading(snap)}", style="bold" if snap.source else "dim")]
    if snap.source:
        lines.append(Text(f"batch  {_known(snap.running)} running · {_known(snap.waiting)} queued"))
        used = 0 if snap.kv_usage is None else round(snap.kv_usage * 100)
        lines.append(Text.assemble("kv     ", meter(used, 100), f" {_known(snap.kv_usage, '{:.0%}')} used"))
        hits = _known(snap.prefix_hit_rate, "{:.0%}")
        lines.append(Text(f"prefix {hits} hit · {_known(snap.preemptions)} preempted"))
    lines.append(Text(f"client {snap.streams_open} streams open"))
    return Text("\n").join(lines)


def server_line(snap: ServerSnapshot) -> str:
    """The one-line form, for short terminals."""
    parts = [f"server {snap.tokens_per_s:.0f} tok/s" if snap.streams_open or snap.running else "server idle"]
    if snap.source:
        parts += [f"{_known(snap.running)} running", f"{_known(snap.waiting)} queued"]
        parts.append(f"kv {_known(snap.kv_usage, '{:.0%}')}")
    else:
        parts.append(_heading(snap))
    parts.append(f"{snap.streams_open} streams")
    return " · ".join(parts)


def pane_rows(snap: ServerSnapshot, labels: Mapping[object, str]) -> list[tuple[str, str, str, str]]:
    """The table: this client's open streams by pane (a server does not say whose requests are whose)."""
    return [(labels.get(tag, str(tag)), "stream", "", f"{rate:.0f}") for tag, rate in snap.pane_rates.items()]
