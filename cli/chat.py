"""`lfm-chat` (the chat): its flags -> AppOptions, checked against this machine, then the app.

Nothing here imports torch, which takes seconds: the loading screen is drawn first, and the
loader thread imports it (tests/app/test_cli.py). An unusable data dir is a SetupError too.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app import __version__
from app.core.attachment import Attachment, AttachmentError
from app.core.conversation import SAMPLING_FIELDS, ChatSettings
from app.core.options import DATA_DIR_ENV, MAX_PANES, AppOptions
from app.store.database import Store
from app.store.errors import StoreError
from cli.flags import (
    Parser,
    SetupError,
    UsageError,
    add_engine_flags,
    add_sampling_flags,
    check_machine,
    json_schema_structure,
    model_flags,
    whole_number,
)
from cli.piped import NoTerminal, take_piped_stdin

if TYPE_CHECKING:
    from cli.oneshot_tools import ToolUse


def build_parser() -> argparse.ArgumentParser:
    defaults = ChatSettings()
    parser = Parser(
        prog="lfm-chat",
        usage="lfm-chat [chat | serve | download | bench] [options]  (each command: --help)\n"
        '       lfm-chat -p "question" [options]  (one reply to stdout; piped stdin is attached)',
        description="Several chat panes streaming at once from one engine with continuous batching "
        "(LFM2, LFM2.5, LFM2-MoE, LFM3).",
        epilog='Keys can be remapped by binding id in DATA_DIR/keymap.json, e.g. {"new_pane": "f2"}; '
        "the ids are listed in the command palette (ctrl+p). Benchmarks: lfm-chat bench --help. "
        "Offline use: lfm-chat download --help. An OpenAI-compatible server: lfm-chat serve --help",
    )
    parser.add_argument("--version", action="version", version=f"lfm-chat {__version__}")
    add_engine_flags(parser)
    chat = parser.add_argument_group("chat")
    chat.add_argument(
        "--panes",
        type=whole_number(1, MAX_PANES),
        default=2,
        help=f"panes to open, 1-{MAX_PANES} (default: 2)",
    )
    chat.add_argument("--system", default="", metavar="TEXT", help="system prompt for new panes")
    add_sampling_flags(parser)
    add_server_flags(parser)
    chat.add_argument(
        "--max-tokens",
        type=whole_number(1),
        help=f"new tokens per reply (default: {defaults.max_tokens}; with --server, the server's default, "
        "up to its context)",
    )
    one_shot = parser.add_argument_group(
        "one-shot",
        'One reply to stdout, then exit: lfm-chat -p "question", or cat notes.md | lfm-chat -p "summarise".',
    )
    one_shot.add_argument(
        "-p",
        "--prompt",
        metavar="TEXT",
        help="ask this, stream the reply to stdout and exit (piped stdin is attached)",
    )
    one_shot.add_argument(
        "--save", action="store_true", help="keep the -p exchange in the conversation history"
    )
    one_shot.add_argument(
        "--mcp",
        type=Path,
        metavar="FILE",
        help='MCP servers whose tools replies may call, as in mcp.json ({"mcpServers": ...}); with -p: '
        "only these (else the data dir's mcp.json too)",
    )
    one_shot.add_argument(
        "--yes",
        action="store_true",
        help="run every tool call without asking (else: y, a or n REASON on the terminal)",
    )
    one_shot.add_argument(
        "--tool-choice",
        choices=("auto", "required"),
        default="auto",
        help="required: the first reply must call a tool (default: auto, the model decides)",
    )
    one_shot.add_argument(
        "--json-schema",
        metavar="FILE|JSON",
        help="the -p reply is JSON that matches this schema (a file, or the schema itself)",
    )
    chat.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"where conversations are saved (default: ${DATA_DIR_ENV} or the user data dir)",
    )
    return parser


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """--server: the panes talk to an OpenAI-compatible server instead of a local engine."""
    server = parser.add_argument_group(
        "server",
        "Chat with a model served elsewhere (vLLM, SGLang, llama-server, lfm-chat serve): no local model "
        "is loaded; --model then names one of the server's models (default: the first it lists).",
    )
    server.add_argument(
        "--server", metavar="URL", help="an OpenAI-compatible server, e.g. http://gpu-box:8000"
    )
    server.add_argument("--api-key", metavar="KEY", help="the server's API key (sent as a bearer token)")


def server_url(url: str) -> str:
    """The base URL, without a trailing / or /v1 (the client adds /v1/... itself)."""
    if not re.match(r"https?://[^/\s]+", url):
        raise UsageError(
            f"--server must be an http:// or https:// URL, like http://127.0.0.1:8000, not {url!r}"
        )
    return re.sub(r"/(v1/?)?$", "", url.rstrip("/") + "/")


def options_from_args(args: argparse.Namespace) -> AppOptions:
    """Validated options; UsageError names the bad flag."""
    flags = model_flags(args)
    options = AppOptions(
        model=args.model,
        revision=args.revision,
        demo=args.demo,
        panes=args.panes,
        engine=flags.engine,
        sampling_flags=flags.sampling,
    )
    chat = ChatSettings(system_prompt=args.system)
    options.chat = options.card_chat(replace(chat, max_tokens=args.max_tokens or chat.max_tokens))
    if args.data_dir is not None:
        options.data_dir = args.data_dir
    options.mcp_file = args.mcp
    if args.server is not None:
        if args.demo or args.revision is not None:
            raise UsageError(
                f"--{'demo' if args.demo else 'revision'} is for a local model; --server uses the server's"
            )
        options.server, options.api_key = server_url(args.server), args.api_key
        # the server's model samples as its own defaults say, but for what the user set
        chosen = {*flags.sampling, *(["max_tokens"] if args.max_tokens is not None else [])}
        in_order = tuple(name for name in SAMPLING_FIELDS if name in chosen)
        options.chat = replace(options.chat, chosen=in_order, preset="")
    elif args.api_key is not None:
        raise UsageError("--api-key goes with --server URL")
    if args.save and args.prompt is None:
        raise UsageError(
            '--save keeps a one-shot reply; it goes with -p "question" (the chat saves by itself)'
        )
    return options


def open_store(options: AppOptions) -> Store:
    """An unusable --data-dir, or one another lfm-chat holds, is found before the UI starts.

    StoreError's message already says which directory and what to do.
    """
    try:
        return Store(options.store_path)
    except StoreError as exc:
        raise SetupError(str(exc)) from None


def run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
    except UsageError as exc:
        parser.error(str(exc))
    message = None if args.prompt is None else one_shot_message(parser, args.prompt)
    structure = None
    if args.json_schema is not None:
        if message is None:
            parser.error("--json-schema goes with -p")
        try:
            structure = json_schema_structure(args.json_schema)
        except UsageError as exc:
            parser.error(str(exc))
    try:
        if options.server is None:
            check_machine(options.source, args.device, args.draft_model)
        store = open_store(options) if message is None or args.save else None
    except SetupError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    if message is not None:
        from cli.oneshot import run_oneshot

        return run_oneshot(options, message, store, structure, one_shot_tools(parser, args))
    options.piped = piped_stdin(parser)
    from app.app import LfmChatApp  # Textual is imported only when a UI will run
    from cli.terminal import native_stderr_aside

    with native_stderr_aside():  # Textual reads sys.__stderr__ when the app is made
        app = LfmChatApp(options, store)
        app.run()
    return app.return_code or 0


def one_shot_tools(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ToolUse | None:
    """--mcp FILE's servers for -p (started only when the reply is asked for), or None without it."""
    if args.mcp is None:
        if args.yes or args.tool_choice != "auto":
            parser.error(f"--{'yes' if args.yes else 'tool-choice'} goes with --mcp FILE")
        return None
    if args.json_schema is not None:
        parser.error("--json-schema and --mcp both decide what the reply is: use one")
    from app.tools.config import McpConfigError, load_servers
    from app.tools.toolbox import ToolBox
    from cli.oneshot_tools import ToolUse

    try:
        servers = load_servers(args.mcp)
    except McpConfigError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    return ToolUse(ToolBox(servers), approve_all=args.yes, required=args.tool_choice == "required")


def piped_stdin(parser: argparse.ArgumentParser) -> Attachment | None:
    """`cat notes.md | lfm-chat`: the text for the first pane to attach, keys then read from the
    terminal (cli/piped.py); None when stdin is the terminal. Unusable: one sentence, exit 1."""
    stdin = getattr(sys.stdin, "buffer", None)
    try:
        if stdin is None or os.isatty(stdin.fileno()):
            return None
    except (OSError, ValueError):  # no descriptor: closed, or a test's stand-in
        return None
    try:
        return take_piped_stdin(stdin)
    except (AttachmentError, NoTerminal) as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")


def one_shot_message(parser: argparse.ArgumentParser, question: str) -> str:
    """`-p`'s message (with piped stdin attached), read before anything loads."""
    from cli.oneshot import question_text
    from cli.reply_stream import OneShotError

    try:
        message = question_text(question, getattr(sys.stdin, "buffer", None))  # None: stdin closed
    except OneShotError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    if not message.strip():
        parser.error('-p needs a question, or text piped into stdin: lfm-chat -p "summarise" < notes.md')
    return message
