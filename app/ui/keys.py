"""Key bindings, declared once for the footer, the command palette and user keymaps.

Every binding gets an id (so `App.set_keymap` can remap it), a short label for the footer and
a command title for the palette. All are priority bindings (a non-priority key is handled only
after the keys typed behind it), so none may sit on a key of the input box's line editor
(`EDITING_KEYS`): a priority binding would take it from the box.

keymap.json is the user's file, so it is checked here before Textual sees it: an entry is kept
only if its id is declared, its keys are ones a terminal can deliver and typing does not need
or editing (priority bindings would take them from the input box), and no two actions of one screen end up
on one key. Everything else is skipped and named, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.keys import Keys, _character_to_key, key_to_character

MAX_KEYMAP_BYTES = 16_384  # a keymap is a few dozen short lines; anything bigger is not one
MODIFIERS = frozenset({"ctrl", "alt", "shift", "meta", "super", "hyper"})
NAMED_KEYS = frozenset(k.value for k in Keys if "+" not in k.value and k.value.isalnum()) - {"return"}
# Terminals send these as the key on the right: a binding to them would never run.
TERMINAL_ALIASES = {
    "ctrl+h": "backspace",
    "ctrl+i": "tab",
    "ctrl+m": "enter",
    "ctrl+left_square_bracket": "escape",
}
RESERVED = {"ctrl+p": "opens the command palette", "ctrl+c": "copies selected text"}
INPUT_KEYS = frozenset(
    {"enter", "shift+enter", "ctrl+j", "backspace", "space", "left", "right", "up", "down", "home", "end"}
)
# What a shell's line editor does with these, the input box does (PromptInput, Textual's TextArea).
EDITING_KEYS = frozenset(
    {
        *("ctrl+a", "ctrl+e", "ctrl+b", "ctrl+f", "alt+b", "alt+f", "ctrl+left", "ctrl+right"),
        *("ctrl+w", "alt+d", "ctrl+u", "ctrl+k", "ctrl+y", "ctrl+d", "delete", "alt+backspace"),
        *("ctrl+z", "ctrl+x", "ctrl+v"),
    }
)


def key(
    keys: str, action: str, label: str, command: str, *, show: bool = True, id: str | None = None
) -> Binding:
    return Binding(keys, action, label, show=show, priority=True, tooltip=command, id=id or action)


def palette_commands(
    app: App[Any], bindings: Iterable[BindingType], run: Callable[[str], Any]
) -> Iterator[SystemCommand]:
    """One palette command per binding, titled by its command text; the help names the key and the id
    that remaps it in keymap.json."""
    for binding in bindings:
        assert isinstance(binding, Binding)
        yield SystemCommand(
            binding.tooltip, f"{app.get_key_display(binding)} · id {binding.id}", partial(run, binding.action)
        )


def key_named(app: App[Any], bindings: Iterable[BindingType], binding_id: str) -> str:
    """The key in force for `binding_id` (keymap.json may have moved it), spelled out ("ctrl+l"),
    for sentences that tell the user which key to press. `user_keys` is LfmChatApp's keymap."""
    binding = next(b for b in bindings if isinstance(b, Binding) and b.id == binding_id)
    return getattr(app, "user_keys", {}).get(binding_id, binding.key).replace(",", "/")


# ChatPane.BINDINGS: they act on the focused pane only (Esc stops only its reply).
PANE_KEYS: list[BindingType] = [
    key("escape", "stop", "Stop", "Stop this pane's reply (or leave the selection)"),
    key("f5", "regenerate", "Regen", "Regenerate the last reply"),
    key("ctrl+s", "settings", "Settings", "Settings: system prompt and sampling of this pane"),
    key("alt+e", "edit_last", "Edit", "Edit the last message and send it again"),
    key("alt+c", "copy", "Copy", "Copy the selected message or code block (else the last reply)"),
    key("alt+k", "copy_code", "Copy code", "Copy the last code block of the last reply"),
    key("ctrl+o", "export", "Export", "Export this conversation to a Markdown file"),
    key("alt+t", "toggle_thinking", "Thinking", "Show or fold the model's thinking in this pane"),
    key("f3", "attach_file", "Attach", "Attach a text file to the next message (or type /file PATH)"),
    key("f4", "pick_model", "Model", "Switch model (on a server: this pane's model)"),
    key("alt+l", "clear", "Clear", "Clear: a new conversation in this pane (old one kept)"),
    key("f6", "fork", "Fork", "Fork: a new pane continuing this chat up to the selected message"),
    key(
        "alt+g",
        "continue_reply",
        "Continue",
        "Continue the last reply where its token limit cut it",
        show=False,
    ),
    key(
        "alt+left",
        "flip(-1)",
        "Older version",
        "Show the older version of the selected message (else of the last one with versions)",
        show=False,
        id="version_previous",
    ),
    key(
        "alt+right",
        "flip(1)",
        "Newer version",
        "Show the newer version of the selected message (else of the last one with versions)",
        show=False,
        id="version_next",
    ),
    key("alt+y", "allow_tool", "Run tool", "Run the tool call this pane asks about, this once", show=False),
    key(
        "alt+u",
        "always_allow_tool",
        "Always run",
        "Run the tool call asked about, and that tool from now on in this pane, without asking",
        show=False,
    ),
    key(
        "alt+x",
        "deny_tool",
        "Deny tool",
        "Deny the tool call asked about (what is typed in the input goes to the model as the reason)",
        show=False,
    ),
    key("alt+m", "mark", "Mark", "Mark or unmark this pane for broadcast", show=False),
    key(
        "alt+a",
        "broadcast",
        "Broadcast",
        "Broadcast this pane's message to the marked panes (else all)",
        show=False,
    ),
    key(
        "ctrl+up",
        "select(-1)",
        "Select",
        "Select the previous message or code block",
        show=False,
        id="select_previous",
    ),
    key(
        "ctrl+down",
        "select(1)",
        "Select next",
        "Select the next message or code block",
        show=False,
        id="select_next",
    ),
    key("pageup", "page(-1)", "Page up", "Scroll this pane's transcript up", show=False, id="page_up"),
    key("pagedown", "page(1)", "Page down", "Scroll this pane's transcript down", show=False, id="page_down"),
    key("ctrl+home", "jump(0)", "Top", "Scroll to the first message", show=False, id="scroll_top"),
    key("ctrl+end", "jump(1)", "Bottom", "Scroll to the latest message", show=False, id="scroll_bottom"),
]


def normal_key(key: str) -> str:
    """`key` as Textual spells it: lower case, a character by its name ("ctrl+?" -> "ctrl+question_mark")."""
    *modifiers, base = key.strip().lower().split("+")
    if len(base) == 1:
        base = _character_to_key(base)
    return "+".join([*modifiers, base])


def refusal(key: str) -> str | None:
    """Why `key` cannot be bound (a phrase that follows the key's name), or None if it can."""
    key = normal_key(key)
    *modifiers, base = key.split("+")
    character = None if base in NAMED_KEYS else key_to_character(base)
    if not set(modifiers) <= MODIFIERS or len(set(modifiers)) < len(modifiers):
        return "is not a key name (modifiers are ctrl, alt, shift, meta, super)"
    if base not in NAMED_KEYS and not (character and character.isprintable()):
        return "is not a key name"
    if key in TERMINAL_ALIASES:
        return f"arrives as {TERMINAL_ALIASES[key]} from terminals"
    if key in RESERVED:
        return RESERVED[key]
    if key in INPUT_KEYS or (character and set(modifiers) <= {"shift"}):
        return "is needed for typing"
    if key in EDITING_KEYS:
        return "edits text in the input box"
    return None


@dataclass
class ParsedKeymap:
    """What keymap.json asks for, as far as it can be done."""

    keys: dict[str, str] = field(default_factory=dict)  # binding id -> its keys, comma-separated
    skipped: list[str] = field(default_factory=list)  # one phrase per entry left out, naming it
    problem: str | None = None  # why the whole file was ignored


def load_keymap(path: Path, screens: Sequence[Sequence[BindingType]]) -> ParsedKeymap:
    """keymap.json at `path`, read no further than it may be long; a missing file asks for nothing."""
    try:
        with path.open("rb") as file:
            return parse_keymap(file.read(MAX_KEYMAP_BYTES + 1), screens)
    except FileNotFoundError:
        return ParsedKeymap()
    except OSError as exc:
        return ParsedKeymap(problem=f"it cannot be read ({exc.strerror or exc})")


def parse_keymap(data: bytes, screens: Sequence[Sequence[BindingType]]) -> ParsedKeymap:
    """`data` checked against the bindings of each screen (all the bindings active at one time)."""
    if len(data) > MAX_KEYMAP_BYTES:
        return ParsedKeymap(problem=f"it is too big (over {MAX_KEYMAP_BYTES} bytes)")
    try:
        entries = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        entries = None
    if not isinstance(entries, dict):
        return ParsedKeymap(problem='it is not a JSON object of binding id -> key, like {"new_pane": "f2"}')
    declared = {b.id for screen in screens for b in screen if isinstance(b, Binding) and b.id}
    parsed = ParsedKeymap()
    for binding_id, keys in entries.items():
        if (why := _entry_refusal(binding_id, keys, declared)) is not None:
            parsed.skipped.append(why)
        else:
            parsed.keys[binding_id] = ",".join(normal_key(k) for k in keys.split(","))
    while (clash := _first_clash(parsed.keys, screens)) is not None:
        loser, key_name, owner = clash
        del parsed.keys[loser]
        parsed.skipped.append(f"{_quote(loser)}: {key_name} is already the key of {_quote(owner)}")
    return parsed


def _entry_refusal(binding_id: str, keys: object, declared: set[str]) -> str | None:
    """Why the entry `binding_id: keys` is skipped, naming it; None if it can be done."""
    if binding_id not in declared:
        return f"{_quote(binding_id)} is not a binding id"
    if not isinstance(keys, str):
        return f"{_quote(binding_id)}: the key is not a string"
    for key_name in keys.split(","):
        if (why := refusal(key_name)) is not None:
            return f"{_quote(binding_id)}: {_quote(key_name.strip())} {why}"
    return None


def _first_clash(
    keymap: dict[str, str], screens: Sequence[Sequence[BindingType]]
) -> tuple[str, str, str] | None:
    """(remapped id, key, id already on that key) for the first remapped binding that lands on a key
    another binding of its screen has. Bindings keeping their key claim first, then the keymap's
    entries in file order, so of two entries on one key the later loses, and a swap is fine."""
    order = list(keymap)
    for screen in screens:
        bindings = [b for b in screen if isinstance(b, Binding)]
        bindings.sort(key=lambda b: order.index(b.id) + 1 if b.id in keymap else 0)
        owners: dict[str, str] = {}
        for binding in bindings:
            for key_name in keymap.get(binding.id or "", binding.key).split(","):
                owner = owners.setdefault(normal_key(key_name), binding.id or binding.action)
                if owner != (binding.id or binding.action) and binding.id in keymap:
                    return binding.id, normal_key(key_name), owner
    return None


def _quote(text: str) -> str:
    """An untrusted name as it may be shown: quoted, escaped (no control reaches the terminal), short."""
    return json.dumps(text[:30] + ("…" if len(text) > 30 else ""))
