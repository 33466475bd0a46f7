"""The native kernels once per instruction set this CPU runs (AVX-512 machines test AVX2 too).

``native`` is parametrized over `kernels.runnable_isas()`: a test taking it runs for every
build the machine can execute, and is skipped, with the reason, only where the CPU runs none.
A build that fails on a CPU that can run it is a failure, not a skip.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from model import kernels

RUNNABLE = kernels.runnable_isas()


@pytest.fixture(params=RUNNABLE or [None], ids=lambda isa: isa or "no-isa", scope="session")
def native(request: pytest.FixtureRequest) -> ModuleType:
    isa = request.param
    if isa is None:
        pytest.skip(f"native CPU kernels cannot run on this machine: {kernels.unavailable_reason()}")
    module, reason = kernels.availability(isa)
    if module is None:
        pytest.fail(f"the {isa} kernels did not build on a CPU that runs them: {reason}")
    assert isa == module.ISA
    return module
