"""Prometheus text exposition (format 0.0.4), read by its rules from whatever a server sends.

A sample line is `name{label="value",...} value [timestamp]`: the name `[a-zA-Z_:][a-zA-Z0-9_:]*`,
label values quoted with only `\\\\`, `\\"` and `\\n` escaped, the value a Go float (`+Inf`, `NaN`,
exponents), the timestamp an int64 of milliseconds. `#` lines (HELP, TYPE, comments) and blank
lines carry nothing the dashboard uses. Lines end at `\\n` only.

The body is someone else's: any bytes come in, no exception goes out. A line that breaks the
rules is skipped and counted; lines past MAX_LINES and samples with more than MAX_LABELS labels
are too. The caller bounds the body's size (server_metrics reads at most 1 MiB of it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_LINES = 50_000  # vLLM's full exposition, histograms included, is a few thousand
MAX_LABELS = 64  # per sample; vLLM uses 2-4

_BLANKS = " \t"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*(,?)[ \t]*')
_LABELS_END = re.compile(r"[ \t]*\}")
_VALUE = re.compile(  # a Go float, then an optional int64 timestamp (more than 19 digits is not one)
    r"[ \t]*([+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?)|nan)"
    r"(?:[ \t]+(-?\d{1,19}))?[ \t]*",
    re.IGNORECASE,
)
_UNESCAPE = re.compile(r"\\(.)")
_ESCAPED = {"\\": "\\", '"': '"', "n": "\n"}
_INT64 = range(-(2**63), 2**63)


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float  # as sent: may be NaN or infinite (Exposition.totals makes those unknown)
    timestamp: int | None = None  # milliseconds since the epoch, if the server gave one


@dataclass(frozen=True, slots=True)
class Exposition:
    samples: tuple[Sample, ...]
    skipped: int  # lines that broke the format's rules or the caps

    def totals(self) -> dict[str, float | None]:
        """{metric name: value summed over its label sets}, None where a value or the sum is not finite.

        vLLM labels each series with the model name; a server with several engines reports one
        series each. Histogram parts keep their suffixed names (`_bucket`, `_sum`, `_count`).
        """
        sums: dict[str, float | None] = {}
        for sample in self.samples:
            known = sums.get(sample.name, 0.0)
            total = None if known is None else known + sample.value
            sums[sample.name] = total if total is not None and math.isfinite(total) else None
        return sums


def parse(body: str | bytes) -> Exposition:
    """Every sample of `body` that follows the format; the rest counted in `skipped`."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    lines = text.split("\n", MAX_LINES)
    skipped = 0
    if len(lines) > MAX_LINES:  # the last part is everything after the cap, unsplit
        skipped = sum(1 for line in lines.pop().split("\n") if line.strip(_BLANKS))
    samples: list[Sample] = []
    for raw in lines:
        line = raw.rstrip("\r").strip(_BLANKS)
        if not line or line.startswith("#"):
            continue
        sample = parse_line(line)
        if sample is None:
            skipped += 1
        else:
            samples.append(sample)
    return Exposition(tuple(samples), skipped)


def parse_line(line: str) -> Sample | None:
    """One sample line (already stripped of blanks), or None if it breaks the rules."""
    name = _NAME.match(line)
    if name is None:
        return None
    labels: list[tuple[str, str]] = []
    position = len(line) - len(line[name.end() :].lstrip(_BLANKS))  # blanks may precede `{`
    if line.startswith("{", position):
        position = _read_labels(line, position + 1, labels)
        if position is None:
            return None
    elif position == name.end():  # a name runs into its value
        return None
    value = _VALUE.fullmatch(line, position)
    if value is None:
        return None
    stamp = None if value[2] is None else int(value[2])
    if stamp is not None and stamp not in _INT64:
        return None
    return Sample(name[0], tuple(labels), float(value[1]), stamp)


def _read_labels(line: str, position: int, labels: list[tuple[str, str]]) -> int | None:
    """Reads `label="value",...}` from `position` into `labels`; the position after `}`, or None."""
    seen: set[str] = set()
    while (end := _LABELS_END.match(line, position)) is None:
        label = _LABEL.match(line, position)
        if label is None or label[1] in seen or len(labels) == MAX_LABELS:
            return None
        seen.add(label[1])
        labels.append((label[1], _UNESCAPE.sub(lambda m: _ESCAPED[m[1]], label[2])))
        position = label.end()
        if not label[3] and _LABELS_END.match(line, position) is None:  # no comma: `}` must follow
            return None
    return end.end()
