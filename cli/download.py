"""`lfm-chat download MODEL`: fetch a checkpoint now, to run later without network or on another machine.

Into the Hugging Face cache by default (then `lfm-chat --model MODEL` starts offline here), or with
--local-dir into a plain directory to copy to an air-gapped machine. It always asks the Hub, so it
also brings a cached copy up to date. Progress is huggingface_hub's own bars, in the terminal.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from cli.flags import Parser
from engine import DEFAULT_MODEL, ModelNotAvailableError, download_checkpoint, is_repo_id


def build_parser() -> Parser:
    parser = Parser(
        prog="lfm-chat download",
        description="Download a checkpoint from the Hugging Face Hub for offline or air-gapped use.",
    )
    parser.add_argument("model", metavar="MODEL", help=f"Hub repo id, e.g. {DEFAULT_MODEL}")
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main)")
    parser.add_argument(
        "--local-dir",
        type=Path,
        metavar="DIR",
        help="put plain files in DIR (to copy elsewhere) instead of the Hugging Face cache",
    )
    return parser


def how_to_run(model: str, revision: str | None, folder: Path, local_dir: Path | None) -> str:
    """Where the files went and the command that uses them."""
    version = f" (revision {revision})" if revision else ""
    if local_dir is not None:
        return (
            f"Downloaded {model}{version} to {folder}\n"
            f"Run it: lfm-chat --model {shlex.quote(str(folder))}\n"
            "To run it on another machine, copy that directory there and pass its new path to --model."
        )
    flags = f"--model {model}" + (f" --revision {shlex.quote(revision)}" if revision else "")
    return (
        f"Downloaded {model}{version} into the Hugging Face cache: {folder}\n"
        f"Run it (no network needed now): lfm-chat {flags}\n"
        f"For another machine, download with --local-dir DIR instead, copy DIR there and run "
        "lfm-chat --model DIR."
    )


def run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not is_repo_id(args.model):
        parser.error(f"{args.model!r} is not a Hub repo id like {DEFAULT_MODEL}")
    try:
        folder = download_checkpoint(args.model, args.revision, local_dir=args.local_dir)
    except ModelNotAvailableError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    print(how_to_run(args.model, args.revision, folder, args.local_dir))
    return 0
