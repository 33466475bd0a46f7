"""What a History row says about a conversation."""

from app.store.database import ConversationSummary
from app.ui.screens.history import describe


def test_a_row_counts_its_messages_in_words_that_agree() -> None:
    one, two = (describe(ConversationSummary(1, "t", 0.0, n), is_open=False).plain for n in (1, 2))
    assert "· 1 message" in one and "1 messages" not in one
    assert "· 2 messages" in two
