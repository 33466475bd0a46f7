"""The engine dashboard's step row shows the last step's drafts: accepted / verified."""

from __future__ import annotations

import dataclasses

from textual.app import App, ComposeResult

from app.ui.widgets.dashboard import Dashboard
from tests.server.test_metrics_text import SNAPSHOT


class DashboardApp(App):
    def compose(self) -> ComposeResult:
        yield Dashboard(id="dash")


async def test_step_row_shows_accepted_of_drafted_tokens() -> None:
    app = DashboardApp()
    async with app.run_test() as pilot:
        dashboard = app.query_one(Dashboard)
        dashboard.show(dataclasses.replace(SNAPSHOT, step_draft_tokens=5, step_accepted_tokens=3), {})
        await pilot.pause()
        assert "spec 3/5" in str(dashboard.meters.render())
