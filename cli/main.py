"""`lfm-chat [chat|serve|download|bench] ...`: which command runs; each is imported only when asked for.

The chat is the default (no subcommand), as people type `lfm-chat --demo`. `serve` needs the serve
extra and `bench` the benchmark modules: importing them lazily keeps `lfm-chat --help` fast and lets
each say what is missing in one line.
"""

from __future__ import annotations

import sys

COMMANDS = ("chat", "serve", "download", "bench")


def run_bench(argv: list[str]) -> int:
    """`lfm-chat bench ...` belongs to bench/; imported only when asked for (it pulls in transformers)."""
    try:
        from bench.cli import main as bench_main
    except ModuleNotFoundError as exc:
        if exc.name not in ("bench", "bench.cli"):
            raise
        print(
            "lfm-chat bench: the benchmarks are not available in this install (no bench.cli).",
            file=sys.stderr,
        )
        return 1
    return bench_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, rest = (argv[0], argv[1:]) if argv[:1] and argv[0] in COMMANDS else ("chat", argv)
    if command == "bench":
        return run_bench(rest)
    if command == "download":
        from cli.download import run
    elif command == "serve":
        from cli.serve import run
    else:
        from cli.chat import run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
