"""Compiling the kernel sources for one instruction set: flags, a build name, the compiler call.

Builds go through `torch.utils.cpp_extension` and are cached under torch's extensions
directory, named by instruction set and a digest of the sources, headers, flags and torch release:
a changed source is a new build. torch's build file names the sources by absolute path, so they are
first copied into the build's own folder, and a finished build is imported straight from its
library without running ninja again (whose commands name torch's headers by the venv's path): every
copy of the same sources (a checkout, a fresh clone with its own venv, an installed wheel) then
builds once and shares that build instead of rebuilding it.
The flags name the instruction sets' features rather than -march=native, so a cached build
also runs on the next machine that has them (a shared home directory, a copied cache).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
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
    "avx512f": ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "fma"),  # no BF16: Cascade/Ice Lake
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
    """Flags, sources and headers by content, and the torch release they build against (the same
    headers and libraries wherever it is installed): a build is reused exactly for these."""
    import torch

    digest = hashlib.sha256(" ".join(compile_flags(isa)).encode())
    digest.update(f"{torch.__version__} {torch.version.git_version}".encode())
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


def _build_directory(name: str) -> Path:
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(name, False))


def _finished_marker(build_directory: Path) -> Path:
    """Written once the build's library has compiled and loaded: a library file alone may be a killed
    link's half."""
    return build_directory / "finished"


def is_built(isa: str, sources: tuple[Path, ...] = SOURCES) -> bool:
    """This exact build finished in torch's cache: loading it takes a moment, not a compile."""
    return _finished_marker(_build_directory(build_name(isa, sources))).is_file()


def _import_library(name: str, build_directory: Path) -> ModuleType:
    """A finished build's module, straight from its library: no build file, no ninja."""
    from torch.utils.cpp_extension import LIB_EXT

    spec = importlib.util.spec_from_file_location(name, build_directory / f"{name}{LIB_EXT}")
    if spec is None or spec.loader is None:
        raise ImportError(f"{build_directory} holds no loadable {name}{LIB_EXT}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(isa: str, sources: tuple[Path, ...] = SOURCES) -> tuple[ModuleType | None, str | None]:
    """Compile ``sources`` for ``isa``, or import the finished build; on failure None and the reason."""
    name = build_name(isa, sources)
    try:
        from torch.utils.cpp_extension import load as load_extension

        build_directory = _build_directory(name)
        with builder_lock(build_directory):
            if _finished_marker(build_directory).is_file():
                return _import_library(name, build_directory), None
            _put_ninja_on_path()
            staged = stage_sources(sources, build_directory / "src")
            module = load_extension(
                name=name,
                sources=[str(source) for source in staged],
                extra_cflags=compile_flags(isa),
                extra_ldflags=["-fopenmp"],
                extra_include_paths=[str(build_directory / "src")],
                verbose=False,
            )
            _finished_marker(build_directory).touch()
    except Exception as exc:  # no compiler, no ninja, a failed build: fall back, say why once
        lines = str(exc).strip().splitlines()
        reason = f"the build failed: {lines[-1] if lines else type(exc).__name__}"
        logger.warning("native CPU kernels unavailable (%s); using PyTorch's slower kernels", reason)
        return None, reason
    return module, None
