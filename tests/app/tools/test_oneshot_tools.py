"""`lfm-chat -p --mcp FILE`: the model's calls run on real MCP servers (with approval) and the model
goes on with their results; on the tiny random checkpoint, the first call is forced (--tool-choice
required) and the test server's schema leaves the random model no free text."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.backend.local import LocalBackend
from app.core.conversation import ChatMessage, Conversation
from app.session.tools import Approval
from app.tools.toolbox import ToolBox
from cli.oneshot_tools import ANSWER_CHARS, WHY, ToolUse, ask_in, run_call, run_tool_turns
from engine import Engine, EngineConfig, ToolCall, ToolCallStream
from tests.app.pilot_helpers import ENGINE, GREEDY
from tests.app.test_oneshot import saved
from tests.app.tools.conftest import stdio_server
from tests.app.tools.test_no_orphans import mcp_file

pytestmark = pytest.mark.subprocess
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def backend(tiny_ckpt: Path) -> Iterator[LocalBackend]:
    backend = LocalBackend(Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE)), "tiny")
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def weather() -> Iterator[ToolBox]:
    box = ToolBox([stdio_server("weather", "weather")])
    yield box
    box.close()


def ask_never(question: str) -> Approval | None:
    raise AssertionError(f"asked {question!r} though --yes approves every call")


def turns(backend: LocalBackend, use: ToolUse, ask=ask_never) -> tuple[Conversation, str, str]:
    conversation = Conversation([ChatMessage("user", "Weather in Paris?")], GREEDY)
    conversation.settings = replace(GREEDY, max_tokens=96)
    out, err = io.StringIO(), io.StringIO()
    run_tool_turns(backend, conversation, out, use, err, ask)
    return conversation, out.getvalue(), err.getvalue()


def test_a_forced_call_runs_and_the_model_goes_on(backend: LocalBackend, weather: ToolBox) -> None:
    conversation, out, err = turns(backend, ToolUse(weather, approve_all=True, required=True))
    roles = [m.role for m in conversation.messages]
    assert roles[:3] == ["user", "assistant", "tool"] and roles[-1] == "assistant"
    call, result = conversation.messages[1], conversation.messages[2]
    parsed = ToolCallStream()
    parsed.feed(call.content)
    parsed.finish()
    assert [c.name for c in parsed.calls] == ["weather"]  # kept as LFM2 writes a call
    city = parsed.calls[0].argument_values["city"]
    assert result.content == f"WEATHER-RESULT: sunny in {city}"
    assert f'tool call weather({{"city": "{city}"}})' in err and "weather returned" in err
    assert "WEATHER-RESULT" not in out  # the result is the model's to read, not stdout's


def test_the_result_reaches_the_models_prompt(backend: LocalBackend, weather: ToolBox) -> None:
    conversation, _, _ = turns(backend, ToolUse(weather, approve_all=True, required=True))
    specs = [s.as_openai() for s in weather.servers()[0].tools]
    prompt = backend.prepare(conversation, specs)
    assert "<|tool_list_start|>" in prompt.text and '"name": "weather"' in prompt.text
    assert "<|tool_response_start|>WEATHER-RESULT: sunny in" in prompt.text


def test_no_approval_refuses_the_call_and_says_so(backend: LocalBackend, weather: ToolBox) -> None:
    conversation, _, err = turns(backend, ToolUse(weather, required=True), ask=lambda question: None)
    assert conversation.messages[2].content.startswith("The user's approval could not be asked for")
    assert "refused weather: no --yes, and no terminal to ask on" in err


def test_a_denied_call_tells_the_model(backend: LocalBackend, weather: ToolBox) -> None:
    asked: list[str] = []

    def deny(question: str) -> Approval:
        asked.append(question)
        return Approval("deny")

    conversation, _, err = turns(backend, ToolUse(weather, required=True), ask=deny)
    assert asked and asked[0].startswith("lfm-chat: run weather(")
    assert conversation.messages[2].content == "The user denied this call."
    assert "denied weather" in err


def test_a_reason_to_deny_goes_back_to_the_model(backend: LocalBackend, weather: ToolBox) -> None:
    deny = Approval("deny", "too risky")
    conversation, _, _ = turns(backend, ToolUse(weather, required=True), ask=lambda question: deny)
    assert conversation.messages[2].content == "The user denied this call. Their reason: too risky"


def test_always_runs_that_tool_for_the_rest_of_the_run_without_asking(weather: ToolBox) -> None:
    use, err = ToolUse(weather), io.StringIO()
    first = run_call(ToolCall("weather", '{"city": "Paris"}'), use, err, lambda question: Approval("always"))
    second = run_call(ToolCall("weather", '{"city": "Oslo"}'), use, err, ask_never)
    assert (first.text, second.text) == ("WEATHER-RESULT: sunny in Paris", "WEATHER-RESULT: sunny in Oslo")
    assert use.always == {"weather"}


@pytest.mark.parametrize(
    ("keys", "answer"),
    [
        ("y\n", Approval("once")),
        ("A\n", Approval("always")),
        ("n too   risky\n", Approval("deny", "too risky")),
        ("n\nit costs money\n", Approval("deny", "it costs money")),  # the reason on a line of its own
        ("no\n\n", Approval("deny")),
        ("\n", Approval("deny")),  # Enter: the default, no
        ("", Approval("deny")),  # the terminal closed
        ("maybe\ny\n", Approval("once")),  # asked again
        ("x\nx\nx\ny\n", Approval("deny")),  # three answers that are none: denied
        ("n \x1b]0;pwned\x07\x1b[2Jwipe it\n", Approval("deny", "wipe it")),
    ],
)
def test_the_terminal_prompt_takes_y_a_or_n_with_a_reason(keys: str, answer: Approval) -> None:
    screen = io.StringIO()
    assert ask_in(io.StringIO(keys), screen, "lfm-chat: run weather(...)?") == answer
    shown = screen.getvalue()
    assert shown.startswith("lfm-chat: run weather(...)? [y once / a always / N and a reason]")
    assert (WHY in shown) == keys.startswith(("n\n", "no\n"))
    assert ("Answer y, a, or n and a reason." in shown) == keys.startswith(("maybe", "x"))


def test_a_line_too_long_is_cut_and_the_next_answer_starts_afresh() -> None:
    answer = ask_in(io.StringIO("n " + "r" * 5 * ANSWER_CHARS + "\n"), io.StringIO(), "run?")
    assert answer.decision == "deny" and answer.reason == "r" * (ANSWER_CHARS - 2)
    assert ask_in(io.StringIO("x" * 5 * ANSWER_CHARS + "\ny\n"), io.StringIO(), "run?") == Approval("once")


def test_on_a_terminal_the_user_denies_with_a_reason_and_the_model_is_told(
    tiny_ckpt: Path, tmp_path: Path
) -> None:
    """A real `lfm-chat -p --mcp FILE` whose terminal (a pty) is where the user answers `n` and then
    the reason; --save keeps the conversation, whose tool message is what the model was told."""
    argv = ["--model", str(tiny_ckpt), "-p", "Weather?", "--mcp", str(mcp_file(tmp_path, "weather"))]
    argv += ["--tool-choice", "required", "--max-tokens", "96", "--save"]
    pid, leader = pty.fork()
    if pid == 0:
        os.environ.update(PYTHONPATH=str(ROOT), LFM_CHAT_DATA_DIR=str(tmp_path))
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "cli", *argv])
    shown, typed = "", ["n\n", "too risky\n"]
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            if typed and shown.endswith(("reason] ", WHY)):
                os.write(leader, typed.pop(0).encode())
            if not select.select([leader], [], [], 1.0)[0]:
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child ended and closed the terminal
                break
            if not data:
                break
            shown += data.decode("utf-8", "replace").replace("\r\n", "\n")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(leader)
    assert os.waitstatus_to_exitcode(status) == 0, shown
    assert not typed and "lfm-chat: denied weather" in shown, shown
    [conversation] = saved(tmp_path)
    tool = next(m for m in conversation.messages if m.role == "tool")
    assert tool.content == "The user denied this call. Their reason: too risky"
    assert tool.name == "weather"


def test_against_serve_the_calls_come_back_as_tool_calls(tiny_ckpt: Path, weather: ToolBox) -> None:
    """--server: the tools go as `tools`, the forced reply as a JSON-schema response, and the calls
    the server streams back (delta.tool_calls, or the constrained list) run as the local ones do."""
    from app.backend.remote import RemoteBackend
    from server.app import create_app
    from server.config import ServerConfig
    from tests.asgi_server import serving

    engine = Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE))
    with serving(create_app(engine, ServerConfig(model_name="tiny"))) as url:
        remote = RemoteBackend.connect(url, None, None)
        try:
            conversation, _, err = turns(remote, ToolUse(weather, approve_all=True, required=True))
        finally:
            remote.close()
    assert [m.role for m in conversation.messages][:3] == ["user", "assistant", "tool"]
    assert conversation.messages[2].content.startswith("WEATHER-RESULT: sunny in")
    assert "weather returned" in err


def test_the_command_line(tiny_ckpt: Path, tmp_path: Path) -> None:
    """A real lfm-chat: --mcp FILE --yes --tool-choice required; stdin and stdout are pipes and there
    is no terminal (a new session), so without --yes the call would be refused."""
    argv = ["--model", str(tiny_ckpt), "-p", "Weather?", "--mcp", str(mcp_file(tmp_path, "weather"))]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LFM_CHAT_DATA_DIR": str(tmp_path)}
    for approval, ran in (["--yes"], "weather returned"), ([], "refused weather"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli",
                *argv,
                *approval,
                "--tool-choice",
                "required",
                "--max-tokens",
                "96",
            ],
            env=env,
            cwd=ROOT,
            capture_output=True,
            timeout=600,
            start_new_session=True,
        )
        assert done.returncode == 0, done.stderr
        assert ran in done.stderr.decode()


def test_tool_flags_need_mcp(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LFM_CHAT_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--demo", "-p", "hi", "--yes"], env=env, cwd=ROOT, capture_output=True
    )
    assert done.returncode == 2 and b"--yes goes with --mcp FILE" in done.stderr
    broken = tmp_path / "mcp.json"
    broken.write_text(json.dumps({"mcpServers": {"x": {"command": 3}}}))
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--demo", "-p", "hi", "--mcp", str(broken)],
        env=env,
        cwd=ROOT,
        capture_output=True,
    )
    assert done.returncode == 1
    assert (
        done.stderr.decode()
        == f"lfm-chat: error: {broken}: mcpServers.x.command must be a non-empty string.\n"
    )
