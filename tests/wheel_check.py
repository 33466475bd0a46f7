"""lfm-chat as a user installs it: run by bin/check-wheel in a fresh venv holding only the wheel.

Checks that the package imports from that venv (not from the repository), that the native
kernels build from the installed sources where the CPU has an instruction set for them, and
that the engine generates from a tiny random bf16 checkpoint. Not a pytest module (no
``test_`` prefix): it needs the venv bin/check-wheel makes.

Usage: python -I tests/wheel_check.py REPO_ROOT   (-I: neither the script's folder nor the
current directory goes on sys.path)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

import model
from engine import Engine, EngineConfig, SamplingParams
from model.native import kernels
from model.native.kernels.build import build_name
from model.native.layers import NativeRMSNorm
from model.tiny.lfm2 import write_tiny_checkpoint


def fail(message: str) -> None:
    print(f"wheel check FAILED: {message}", file=sys.stderr)
    raise SystemExit(1)


def check_installed(repo: Path) -> Path:
    """The package comes from this venv's site-packages; returns where the kernel sources are."""
    package = Path(model.__file__).resolve().parent
    if package.is_relative_to(repo) or not package.is_relative_to(Path(sys.prefix).resolve()):
        fail(f"model imported from {package}, not from the venv at {sys.prefix}")
    sources = Path(kernels.__file__).resolve().parent
    names = sorted(p.name for p in sources.iterdir() if p.suffix in (".cpp", ".h"))
    print(f"kernel sources: {sources}: {', '.join(names)}")
    if not any(name.endswith(".h") for name in names):
        fail(f"the installed kernels have no headers in {sources}")
    return sources


def check_kernels(sources: Path) -> bool:
    """Did the kernels build here? Failing loudly where the CPU has an instruction set for them."""
    native, reason = kernels.load(), kernels.unavailable_reason()
    if native is None:
        if reason is not None and reason.startswith("this CPU lacks"):
            print(f"native kernels: none for this CPU ({reason}); PyTorch's kernels run instead")
            return False
        fail(f"the native kernels did not build from {sources}: {reason or 'turned off'}")
    built = Path(native.__file__).resolve()
    print(f"native kernels: {native.__name__} loaded from {built}")
    # a build's name is the digest of its sources and headers: this one must be the installed files'
    if native.__name__ != build_name(native.ISA):
        fail(f"the kernels loaded ({native.__name__}) are not the build of the files in {sources}")
    return True


def check_generation(native: bool) -> None:
    """Greedy tokens from a tiny random bf16 checkpoint, through the engine."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_checkpoint(Path(tmp) / "tiny", dtype=torch.bfloat16)
        config = EngineConfig(dtype="bfloat16", num_kv_blocks=64, block_size=16, max_num_seqs=4)
        engine = Engine.from_pretrained(path, config, progress=lambda stage, fraction: None)
        norm = engine.runner.model.model.embedding_norm
        if native != isinstance(norm, NativeRMSNorm):
            fail(f"the model's layers are {type(norm).__name__}, with native kernels {native}")
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        outs = engine.generate(["Hello there", list(range(20, 60))], params)
    for out in outs:
        if out.error or len(out.token_ids) != 8:
            fail(f"generation gave {out.token_ids} ({out.finish_reason}: {out.error})")
    print(f"generation: {[out.token_ids for out in outs]} ({type(norm).__name__} layers)")


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        fail("usage: wheel_check.py REPO_ROOT")
    os.environ.pop("LFM_CHAT_NATIVE_KERNELS", None)  # the switch that turns them off must not skip the build
    sources = check_installed(Path(argv[1]).resolve())
    check_generation(check_kernels(sources))
    print("wheel check: ok")


if __name__ == "__main__":
    main(sys.argv)
