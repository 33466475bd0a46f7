"""After loading, freed weight-sized buffers leave the process instead of the heap keeping them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from model.memory import return_large_frees_to_os

STATUS = Path("/proc/self/status")


def anon_mib() -> float:
    return int(re.search(r"RssAnon:\s+(\d+)", STATUS.read_text()).group(1)) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux") or not STATUS.exists(), reason="glibc + /proc only")
def test_freed_tensors_are_returned_to_the_os():
    mapped = torch.ones(20 << 20, dtype=torch.uint8)
    del mapped  # glibc's own threshold would now rise to 20 MB
    assert return_large_frees_to_os()
    for size_mb in (4, 9, 2, 18):  # what freeing unfused q/k/v and w1/w3 looks like during a load
        before = anon_mib()
        tensor = torch.ones(size_mb << 20, dtype=torch.uint8)
        assert anon_mib() - before >= size_mb * 0.9
        del tensor
        assert anon_mib() - before < 1
