"""A frame drawn for a text box just removed (a pane closed mid-render) must not crash the app."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import TextArea

from app.ui.widgets.prompt_input import PromptInput


class _OneBox(App[None]):
    def compose(self) -> ComposeResult:
        yield PromptInput(id="box")


async def test_a_removed_prompt_box_renders_blank_instead_of_raising() -> None:
    app = _OneBox()
    async with app.run_test() as pilot:
        box = app.query_one(PromptInput)
        box.insert("typed text")
        await pilot.pause()
        assert "typed" in "".join(segment.text for segment in box.render_lines(Region(0, 0, 20, 1))[0])
        await box.remove()
        lines = box.render_lines(Region(0, 0, 20, 2))  # Textual 8.2 raised KeyError here (#6528)
        assert [line.text for line in lines] == [" " * 20, " " * 20]


def _filled(box: PromptInput) -> list[int]:
    """Counts the real fillings of the box's theme from its styles."""
    theme = box._theme
    assert theme is not None
    calls = [0]
    fill = theme.apply_css

    def counted(text_area: object) -> None:
        calls[0] += 1
        fill(text_area)  # type: ignore[arg-type]

    theme.apply_css = counted  # type: ignore[method-assign]
    return calls


def _drawn(render: Callable[[PromptInput, Region], list[Strip]], box: PromptInput, crop: Region) -> list[str]:
    """The lines ``render`` draws, styles included: the box's own, or Textual's TextArea's (which
    fills the theme first, every time)."""
    return [line.text + repr(line._segments) for line in render(box, crop)]


async def test_the_theme_is_filled_from_the_styles_only_when_they_changed() -> None:
    app = _OneBox()
    async with app.run_test() as pilot:
        box = app.query_one(PromptInput)
        box.insert("typed text")
        await pilot.pause()
        crop = Region(0, 0, 30, 2)
        calls = _filled(box)
        for _ in range(5):
            box.render_lines(crop)
        assert calls[0] <= 1  # Textual's TextArea fills it at each of the five
        box.blur()  # :focus styles the cursor and the box otherwise
        await pilot.pause()
        drawn = _drawn(PromptInput.render_lines, box, crop)
        assert calls[0] >= 1
        assert drawn == _drawn(TextArea.render_lines, box, crop)
        app.theme = "textual-light" if app.current_theme.dark else "textual-dark"
        await pilot.pause()
        assert _drawn(PromptInput.render_lines, box, crop) == _drawn(
            TextArea.render_lines, box, crop
        )  # Textual gives the box a new theme: filled again
        calls = _filled(box)
        for _ in range(3):
            box.render_lines(crop)
        assert calls[0] <= 1
