"""What the CPU can do, from /proc/cpuinfo (Linux; elsewhere nothing is assumed)."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The instruction-set flags the kernel reports; empty where it cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(word for line in text.splitlines() if line.startswith("flags") for word in line.split())
