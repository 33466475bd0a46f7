"""A description of where the figures were measured; timings mean nothing without it."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(threads: int, dtype: str) -> dict[str, object]:
    """CPU, cores, library versions, threads, dtype and the load average (other work skews timings)."""
    try:
        import transformers

        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": threads,
        "dtype": dtype,
        "torch": torch.__version__,
        "transformers": transformers_version,
        "python": platform.python_version(),
        "platform": sys.platform,
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
