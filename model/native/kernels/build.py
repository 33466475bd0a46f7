"""Compiling the kernel sources for one instruction set: flags, a build name, the compiler call.

Builds go through `torch.utils.cpp_extension` and are cached under torch's extensions
directory, named by instruction set and a digest of the sources, headers and flags: a changed
source is a new build. torch's build file names the sources by absolute path, so they are first
copied into the build's own folder: every copy of the same sources (a checkout, a fresh clone, an
installed wheel) then builds once and shares that build instead of rebuilding over the others.
The flags name the instruction sets' features rather than -march=native, so a cached build
also runs on the next machine that has them (a shared home directory, a copied cache).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)

_SOURCE_FILES = (
    "cpu_linear.cpp",
    "cpu_linear_bf12.cpp",
    "cpu_linear_int4.cpp",
    "cpu_attention.cpp",
    "cpu_layer_ops.cpp",
    "cpu_moe.cpp",
    "cpu_sampling.cpp",
    "cpu_decode_stack.cpp",
    "bindings.cpp",
)
SOURCES = tuple(Path(__file__).with_name(name) for name in _SOURCE_FILES)

# Instruction set -> the /proc/cpuinfo flags it needs, widest first.
ISAS: dict[str, tuple[str, ...]] = {
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni", "fma"),
    "avxvnni": ("avx2", "fma", "avx_vnni"),
    "avx2": ("avx2", "fma"),
}
# -ffp-contract=off: no fused multiply-add where the PyTorch code rounds between multiply and add.
_COMMON_CFLAGS = ["-O3", "-fopenmp", "-ffp-contract=off"]


def compile_flags(isa: str) -> list[str]:
    """-m flags naming exactly the instruction set's features (avx512_bf16 -> -mavx512bf16)."""
    return [*_COMMON_CFLAGS, *(f"-m{flag.replace('_', '')}" for flag in ISAS[isa])]


def _put_ninja_on_path() -> None:
    """torch's builder runs `ninja` from PATH; the ninja package installs it beside the venv's python,
    which is not on PATH unless the venv is activated."""
    try:
        import ninja
    except ImportError:
        return
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join((ninja.BIN_DIR, os.environ.get("PATH", "")))


def _files(sources: tuple[Path, ...]) -> list[tuple[str, bytes]]:
    """(name in the build folder, contents) of the sources and of the package's headers."""
    here = Path(__file__).parent
    headers = sorted(here.rglob("*.h"))
    return [(s.name, s.read_bytes()) for s in sources] + [
        (h.relative_to(here).as_posix(), h.read_bytes()) for h in headers
    ]


def _digest(sources: tuple[Path, ...], isa: str) -> str:
    """Flags, sources and headers by content, and the torch they build against: a build is reused
    exactly for these, wherever the sources are. Two venvs share no build directory, so ninja does
    not rebuild one venv's build over the other's each time they take turns (its commands name
    torch's headers by the venv's path)."""
    from torch.utils.cpp_extension import include_paths

    digest = hashlib.sha256(" ".join(compile_flags(isa)).encode())
    digest.update(" ".join(include_paths()).encode())
    for name, data in _files(sources):
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()[:10]


def stage_sources(sources: tuple[Path, ...], folder: Path) -> list[Path]:
    """Copy the sources and headers into ``folder``; the staged sources. A file already there with the
    same contents is left alone: a new mtime would make ninja rebuild what is built."""
    for name, data in _files(sources):
        target = folder / name
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, target)  # another process staging at once sees the whole file or none
    return [folder / source.name for source in sources]


@contextmanager
def builder_lock(build_directory: Path) -> Iterator[None]:
    """Held while this build is staged, compiled or loaded. Unlike torch's lock file, which a killed
    build leaves behind and torch then waits on forever, a flock is released by the system when its
    holder dies; so, holding it, a torch lock file there can only be a dead builder's, and goes."""
    build_directory.mkdir(parents=True, exist_ok=True)
    with open(build_directory / "builder.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if (build_directory / "lock").exists():
                (build_directory / "lock").unlink(missing_ok=True)
                logger.warning("removed the lock a kernel build that did not finish left behind")
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_name(isa: str, sources: tuple[Path, ...] = SOURCES) -> str:
    return f"lfm_chat_cpu_kernels_{isa}_{_digest(sources, isa)}"


def is_built(isa: str, sources: tuple[Path, ...] = SOURCES) -> bool:
    """The library of this exact build is in torch's cache: loading it takes a moment, not a compile."""
    from torch.utils.cpp_extension import LIB_EXT, _get_build_directory

    name = build_name(isa, sources)
    return (Path(_get_build_directory(name, False)) / f"{name}{LIB_EXT}").is_file()


def build(isa: str, sources: tuple[Path, ...] = SOURCES) -> tuple[ModuleType | None, str | None]:
    """Compile ``sources`` for ``isa`` (cached by torch); on failure None and the reason."""
    name = build_name(isa, sources)
    try:
        from torch.utils.cpp_extension import _get_build_directory
        from torch.utils.cpp_extension import load as load_extension

        _put_ninja_on_path()
        build_directory = Path(_get_build_directory(name, False))
        with builder_lock(build_directory):
            staged = stage_sources(sources, build_directory / "src")
            module = load_extension(
                name=name,
                sources=[str(source) for source in staged],
                extra_cflags=compile_flags(isa),
                extra_ldflags=["-fopenmp"],
                extra_include_paths=[str(build_directory / "src")],
                verbose=False,
            )
    except Exception as exc:  # no compiler, no ninja, a failed build: fall back, say why once
        lines = str(exc).strip().splitlines()
        reason = f"the build failed: {lines[-1] if lines else type(exc).__name__}"
        logger.warning("native CPU kernels unavailable (%s); using PyTorch's slower kernels", reason)
        return None, reason
    return module, None
