"""A checkpoint's chat template is untrusted code: a render is bounded in time, CPU and memory.

Each bomb below froze the process (arithmetic and string operations hold the GIL, so a deadline
checked in loops never fires) or allocated gigabytes. Each must end as one ChatTemplateError that
names the template file, within a hang bound, without the test process growing by more than
``RSS_BOUND``, while other threads keep running Python.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from model.errors import ChatTemplateError, CheckpointError
from model.text import template_worker
from model.text.tokenizer import Tokenizer

HANG_BOUND = 20.0  # seconds; unbounded, the slowest of these runs for hours
RSS_BOUND = 300 * 2**20  # bytes the test process may grow by while a bomb renders
CONVERSATION = [{"role": "user", "content": "12345678"}]

BOMBS = {
    "power": "{% set n = messages|length %}{{ (10*n)**(10**8) }}",
    "power-literal": "{{ 10**(10**8) }}",
    "power-squaring": "{% set ns = namespace(x=7) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
    "{% endfor %}{{ ns.x > 1 }}",
    "repeat-literal": "{{ 'a'*3000000000 }}",
    "repeat-scaled": "{% set n = messages|length %}{{ ('a'*(3000000000*n))|length }}",
    "repeat-content": "{{ messages[0].content*100000000 }}",
    "repeat-reversed": "{{ (100000000*messages[0].content)|length }}",
    "repeat-list": "{{ ([messages]*1000000000)|length }}",
    "repeat-repr": "{{ [messages[0].content*1000]*100000 }}",
    "range-loop": "{% for i in range(10**9) %}{{ i }}{% endfor %}",
    "range-list": "{{ range(10**12)|list|length }}",
    "nested-loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "doubling-concat": "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s|length }}",
    "doubling-plus": "{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s|length }}",
    "doubling-list": "{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s|length }}",
    "center": "{{ ''|center(10**10) }}",
    "center-literal": "{{ ''|center(10000000000) }}",
    "center-method": "{{ ''.center(10**10) }}",
    "ljust-method": "{{ 'x'.ljust(10**10) }}",
    "indent": "{{ ('\\n'*1000000)|indent(' '*100000) }}",
    "join": "{{ (['a'*10000000]*1000)|join }}",
    "join-method": "{{ ''.join(['a'*10000000]*1000) }}",
    "replace": "{{ ('a'*1000000)|replace('', 'b'*100000) }}",
    "format-filter": "{{ '%0999999999d'|format(1) }}",
    "percent": "{{ '%0999999999d' % 1 }}",
    "percent-star": "{{ '%*d' % (999999999, 1) }}",
    "str-format": "{{ '{:>9999999999}'.format(1) }}",
    "str-format-nested": "{{ '{:>{}}'.format(1, 9999999999) }}",
    "wordwrap": "{{ ('a b '*1000000)|wordwrap(1, wrapstring='x'*100000) }}",
    "tojson-indent": "{{ [[[[[[messages]]]]]]|tojson(indent=10**9) }}",
    "batch": "{{ messages|batch(10**9, 'x')|list|length }}",
    "slice": "{{ messages|slice(10**9)|list|length }}",
    "string-list": "{{ ('a'*30000000)|list|length }}",
    "splitlines": "{{ ('\\n'*30000000).splitlines()|length }}",
    "output": "{% for i in range(100000) %}{{ 'a'*10000 }}{% endfor %}",
    "escape-class": "{{ ''.__class__ }}",
    "escape-subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "escape-globals": "{{ cycler.__init__.__globals__ }}",
    "escape-context": "{{ self._TemplateReference__context }}",
    "escape-namespace": "{{ namespace.__init__.__globals__ }}",
}


@pytest.fixture(params=["worker", "in-process"])
def render_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each bomb in a worker process, and in this process: the fallback where none can start."""
    if request.param == "in-process":
        monkeypatch.setattr(template_worker, "POOL", template_worker.WorkerPool(executable=""))
    return request.param


def _peak_rss() -> int:
    """This process's peak resident set (VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def _checkpoint(tiny_ckpt: Path, tmp_path: Path, template: str) -> Path:
    ckpt = Path(shutil.copytree(tiny_ckpt, tmp_path / "ckpt"))
    (ckpt / "chat_template.jinja").write_text(template, encoding="utf-8")
    return ckpt


def _render_in_thread(tokenizer: Tokenizer) -> tuple[threading.Thread, list[BaseException | str]]:
    """Start a render in a daemon thread (a frozen one must not keep the test run alive)."""
    outcome: list[BaseException | str] = []

    def render() -> None:
        try:
            outcome.append(tokenizer.render_chat(CONVERSATION))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=render, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize("name", BOMBS)
def test_a_bomb_is_a_clear_error_within_seconds_and_memory_stays_bounded(
    name: str, render_mode: str, tiny_ckpt: Path, tmp_path: Path
) -> None:
    ckpt = _checkpoint(tiny_ckpt, tmp_path, BOMBS[name])
    tokenizer = Tokenizer.from_pretrained(ckpt)
    peak_before = _peak_rss()
    thread, outcome = _render_in_thread(tokenizer)
    thread.join(HANG_BOUND)
    assert not thread.is_alive(), f"the render still runs after {HANG_BOUND:g} s"
    [error] = outcome
    assert isinstance(error, ChatTemplateError), error
    message = str(error)
    assert str(ckpt / "chat_template.jinja") in message and "\n" not in message
    assert _peak_rss() - peak_before < RSS_BOUND


def test_other_threads_keep_running_python_while_a_bomb_renders(
    render_mode: str, tiny_ckpt: Path, tmp_path: Path
) -> None:
    """The render must not hold the GIL: this thread counts loop steps all along, with no long gap."""
    tokenizer = Tokenizer.from_pretrained(_checkpoint(tiny_ckpt, tmp_path, BOMBS["power"]))
    thread, outcome = _render_in_thread(tokenizer)
    longest_gap, last = 0.0, time.monotonic()
    give_up = last + HANG_BOUND
    while thread.is_alive() and last < give_up:
        now = time.monotonic()
        longest_gap, last = max(longest_gap, now - last), now
    assert not thread.is_alive(), f"the render still runs after {HANG_BOUND:g} s"
    assert isinstance(outcome[0], ChatTemplateError)
    assert longest_gap < 1.0, f"this thread stood still for {longest_gap:.1f} s"


def test_a_template_that_is_not_utf8_is_a_checkpoint_error_naming_the_file(
    tiny_ckpt: Path, tmp_path: Path
) -> None:
    ckpt = _checkpoint(tiny_ckpt, tmp_path, "")
    (ckpt / "chat_template.jinja").write_bytes(b"{{ messages }}\xff\xfe\x80")
    with pytest.raises(CheckpointError, match=r"chat_template\.jinja is not UTF-8") as info:
        Tokenizer.from_pretrained(ckpt)
    assert str(ckpt / "chat_template.jinja") in str(info.value)


def test_a_huge_template_file_is_a_checkpoint_error_naming_the_file(tiny_ckpt: Path, tmp_path: Path) -> None:
    ckpt = _checkpoint(tiny_ckpt, tmp_path, "{{ 'x' }}" * 2_000_000)
    with pytest.raises(CheckpointError, match=r"chat_template\.jinja is larger than"):
        Tokenizer.from_pretrained(ckpt)


def _config_template(ckpt: Path, template: object) -> None:
    path = ckpt / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = template
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (5, "is not a template"),
        ([{"name": "default", "template": 5}], "is not a template"),
        (["x"], "is not a template"),
        ("{{ 'x' }}" * 200_000, "is larger than"),
    ],
    ids=["number", "list-of-numbers", "list-of-strings", "huge"],
)
def test_a_bad_chat_template_in_tokenizer_config_is_a_checkpoint_error_naming_the_file(
    tiny_ckpt: Path, tmp_path: Path, template: object, message: str
) -> None:
    ckpt = Path(shutil.copytree(tiny_ckpt, tmp_path / "ckpt"))
    _config_template(ckpt, template)
    with pytest.raises(CheckpointError, match=message) as info:
        Tokenizer.from_pretrained(ckpt)
    assert str(ckpt / "tokenizer_config.json") in str(info.value)


def test_the_worker_caps_memory_the_prices_allow(tiny_ckpt: Path, tmp_path: Path) -> None:
    """Twenty distinct 64 MB strings, each within the caps: the worker's address-space limit ends it."""
    sets = "".join(f"{{% set ns.s{i} = big ~ {i} %}}" for i in range(20))
    template = (
        "{% set ns = namespace() %}{% set big = '\U0001f600' * 16000000 %}" + sets + "{{ ns.s0|length }}"
    )
    tokenizer = Tokenizer.from_pretrained(_checkpoint(tiny_ckpt, tmp_path, template))
    peak_before = _peak_rss()
    with pytest.raises(ChatTemplateError, match="memory") as info:
        tokenizer.render_chat(CONVERSATION)
    assert "chat_template.jinja" in str(info.value)
    assert _peak_rss() - peak_before < RSS_BOUND
    # the worker gave its memory back: left holding ~1 GiB, the next render (a 4 MB prompt is
    # fine) could fail for want of memory, and an idle app would keep it resident
    assert all(_resident_bytes(pid) < RSS_BOUND for pid in template_worker.POOL.pids())
    assert tokenizer.render_chat is not None and Tokenizer.from_pretrained(tiny_ckpt).render_chat(
        CONVERSATION
    )


def _resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
