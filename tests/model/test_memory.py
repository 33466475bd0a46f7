"""After loading, freed weight-sized buffers leave the process instead of the heap keeping them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# In a fresh interpreter: this test process's heap may already hold free chunks that would
# serve (and hide) the allocations.
SCENARIO = textwrap.dedent(
    """
    import re, sys, torch
    from model.memory import return_large_frees_to_os

    def anon_mib():
        return int(re.search(r"RssAnon:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024

    mapped = torch.ones(20 << 20, dtype=torch.uint8)
    del mapped  # glibc's own threshold would now rise to 20 MB
    if sys.argv[1] == "fixed":
        assert return_large_frees_to_os()
    start = anon_mib()
    for size_mb in (4, 9, 2, 18):  # what freeing unfused q/k/v and w1/w3 looks like during a load
        before = anon_mib()
        tensor = torch.ones(size_mb << 20, dtype=torch.uint8)
        grew = anon_mib() - before
        del tensor
        assert sys.argv[1] != "fixed" or grew >= size_mb * 0.9  # a fresh mapping each time
    print(anon_mib() - start)
    """
)


def resident_after_frees(mode: str) -> float:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, mode], cwd=root, capture_output=True, text=True, check=True
    )
    return float(done.stdout)


ON_GLIBC_WITH_PROC = sys.platform.startswith("linux") and Path("/proc/self/status").exists()


@pytest.mark.skipif(not ON_GLIBC_WITH_PROC, reason="glibc malloc and /proc only")
def test_freed_tensors_are_returned_to_the_os():
    assert resident_after_frees("fixed") < 2
    assert resident_after_frees("glibc default") > 10  # the scenario can tell the difference
