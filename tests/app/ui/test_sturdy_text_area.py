"""A frame drawn for a text box just removed (a pane closed mid-render) must not crash the app."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Region

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
