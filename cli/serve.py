"""`lfm-chat serve`: the engine behind an OpenAI-compatible HTTP API (`pip install 'lfm-chat[serve]'`).

The model, engine and sampling flags are the chat's own (cli/flags.py), checked by the same code;
the sampling flags set what a request gets for the fields it leaves out. Safe by default: it
binds 127.0.0.1, and binding any other address without --api-key is refused before anything loads.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import sys
import time
from collections.abc import Callable

from cli.flags import (
    Parser,
    SetupError,
    UsageError,
    add_engine_flags,
    add_sampling_flags,
    model_flags,
    whole_number,
)
from engine import CheckpointError, ModelNotAvailableError, ModelSource, default_cache_dir, load_engine
from server.limits import FD_RESERVE, MAX_BODY_BYTES, ConnectionLimits, connection_cap

API_KEY_ENV = "LFM_CHAT_API_KEY"
DEMO_MODEL_NAME = "lfm-chat-demo"
SERVE_EXTRA = ("starlette", "uvicorn", "anyio", "h11", "click")  # the serve extra and what it pulls in
GRACEFUL_SHUTDOWN_S = 5  # after --drain-timeout ended the requests, for their last bytes; then cut


def build_parser() -> Parser:
    parser = Parser(
        prog="lfm-chat serve",
        description="Serve the engine over an OpenAI-compatible HTTP API: /v1/chat/completions, "
        "/v1/completions, /v1/models, /health and Prometheus /metrics with vLLM's metric names.",
        epilog="Point the TUI at it with lfm-chat --server http://HOST:PORT (docs/SCALE_OUT.md).",
    )
    net = parser.add_argument_group("server")
    net.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; any other needs --api-key)",
    )
    net.add_argument("--port", type=whole_number(0, 65535), default=8000, help="TCP port (default: 8000)")
    net.add_argument(
        "--api-key",
        dest="key",
        metavar="KEY",
        help=f"require 'Authorization: Bearer KEY' on /v1/* (default: ${API_KEY_ENV}, else none)",
    )
    net.add_argument(
        "--served-model-name",
        metavar="NAME",
        help="the model's name in the API (default: the --model value)",
    )
    net.add_argument(
        "--max-tokens",
        metavar="N",
        type=whole_number(1),
        default=4096,
        help="the most new tokens a request may ask for, and what it gets if it names none (default: 4096)",
    )
    net.add_argument(
        "--max-waiting",
        metavar="N",
        type=whole_number(0),
        default=64,
        help="requests queued beyond the running batch before new ones get 503 (default: 64)",
    )
    net.add_argument(
        "--max-requests-per-client",
        metavar="N",
        type=whole_number(1),
        help="requests one client (IP address) may have running or waiting before it gets 429 "
        "(default: --max-num-seqs plus half of --max-waiting)",
    )
    _add_connection_flags(parser)
    add_engine_flags(parser)
    add_sampling_flags(parser)
    return parser


def _add_connection_flags(parser: Parser) -> None:
    """What one HTTP client may hold: the caps and deadlines of server/connections.py."""
    limits, group = ConnectionLimits(), parser.add_argument_group("HTTP clients")
    group.add_argument(
        "--max-connections",
        metavar="N",
        type=whole_number(1),
        default=limits.max_connections,
        help="connections open at once; at the cap the oldest idle one is closed (then a stalled reply, "
        f"then a slow body), and if none is the newcomer gets 503 (default: {limits.max_connections}, "
        f"at most the file-descriptor limit less {FD_RESERVE})",
    )
    for flag, what, seconds in (
        ("--header-timeout", "a request's headers", limits.header_timeout),
        ("--body-timeout", "a request's body after its headers", limits.body_timeout),
    ):
        group.add_argument(
            flag,
            metavar="S",
            type=whole_number(1, 3600),
            default=int(seconds),
            help=f"seconds a client may take to send {what}, then 408 (default: {seconds:g})",
        )
    group.add_argument(
        "--send-timeout",
        metavar="S",
        type=whole_number(1, 3600),
        default=int(limits.send_timeout),
        help="seconds a reply may wait on a client that reads none of it, then the connection is "
        f"closed (default: {limits.send_timeout:g})",
    )
    group.add_argument(
        "--drain-timeout",
        metavar="S",
        type=whole_number(0, 3600),
        default=int(limits.drain_timeout),
        help="on SIGTERM or Ctrl-C: seconds requests in flight may still run, then each is ended (a stream "
        "with its final chunk and [DONE], a whole reply with a 503) "
        f"(default: {limits.drain_timeout:g})",
    )
    group.add_argument(
        "--max-body-bytes",
        metavar="N",
        type=whole_number(1024),
        default=MAX_BODY_BYTES,
        help=f"the largest request body, then 413 (default: {MAX_BODY_BYTES}, 4 MiB)",
    )


def api_key(args: argparse.Namespace) -> tuple[str | None, str]:
    """The key and where it came from (--api-key, else $LFM_CHAT_API_KEY), for errors that name it."""
    if args.key is not None:
        return args.key, "--api-key"
    return os.environ.get(API_KEY_ENV), f"${API_KEY_ENV}"


def is_loopback(host: str) -> bool:
    """Only this machine can reach the address (a name other than localhost may resolve anywhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, api_key: str | None, source: str = "--api-key") -> None:
    """Refuse to open the engine to the network without a key (UsageError: exit code 2)."""
    if api_key == "":
        raise UsageError(f"{source} is empty; give a key, or leave it out on 127.0.0.1")
    if api_key is None and not is_loopback(host):
        raise UsageError(
            f"--host {host} lets other machines use the engine, so it needs --api-key KEY "
            f"(or ${API_KEY_ENV}); or keep the default --host 127.0.0.1"
        )


def run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    key, key_source = api_key(args)
    try:
        check_exposure(args.host, key, key_source)
        flags = model_flags(args)
    except UsageError as exc:
        parser.error(str(exc))
    try:
        flags.check_machine()
        from server.app import create_app
        from server.config import ServerConfig
        from server.guarded_server import make_server
    except SetupError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in SERVE_EXTRA:
            raise
        hint = "pip install 'lfm-chat[serve]'"
        parser.exit(1, f"{parser.prog}: error: {exc.name} is missing; install the serve extra: {hint}\n")
    try:
        engine = load_engine(flags.source, flags.engine, default_cache_dir(), _progress(parser.prog))
    except (CheckpointError, ModelNotAvailableError) as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    config = ServerConfig(
        model_name=args.served_model_name or _default_name(flags.source),
        api_key=key,
        max_tokens=args.max_tokens,
        max_waiting=args.max_waiting,
        max_per_client=args.max_requests_per_client,
        max_body_bytes=args.max_body_bytes,
        sampling=dict(flags.source.sampling_defaults(flags.sampling).values),
    )
    print(f"{parser.prog}: {config.model_name} on http://{args.host}:{args.port}/v1", file=sys.stderr)
    limits = ConnectionLimits(
        args.max_connections, args.header_timeout, args.body_timeout, args.send_timeout, args.drain_timeout
    )
    if (cap := connection_cap(limits.max_connections)) < limits.max_connections:
        note = f"at most {cap} connections: the file-descriptor limit (ulimit -n) allows no more"
        print(f"{parser.prog}: {note}", file=sys.stderr)
    app = create_app(engine, config)
    service = app.state.service
    options = {"host": args.host, "port": args.port, "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S}
    server = make_server(app, limits, on_drain_timeout=service.end_all, **options)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises the Ctrl-C again once it has shut down
        server.run()
    return 0


def _default_name(source: ModelSource) -> str:
    return DEMO_MODEL_NAME if source.demo else source.model


def _progress(prog: str) -> Callable[[str, float | None], None]:
    """Loading stages on stderr: each new one, and a download's progress at most once a second."""
    last = {"stage": "", "time": 0.0}

    def report(stage: str, fraction: float | None) -> None:
        now = time.monotonic()
        if stage != last["stage"] and (fraction is None or now - last["time"] >= 1.0):
            print(f"{prog}: {stage}", file=sys.stderr)
            last.update(stage=stage, time=now)

    return report
