"""The engine, backend and store fixtures of test_pane_session serve every session test file."""

from tests.app.session.test_pane_session import backend, engine, store  # noqa: F401 (fixtures)
