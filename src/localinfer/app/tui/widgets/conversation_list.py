"""The sidebar: stored conversations, most recent first."""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import Label, ListItem, ListView

from localinfer.app.tui.conversations import Conversation


class ConversationItem(ListItem):
    def __init__(self, conversation: Conversation) -> None:
        super().__init__(Label(conversation.title, markup=False), id=f"conversation-{conversation.id}")
        self.conversation = conversation


class ConversationList(ListView):
    """Shows conversations; selecting one posts ListView.Selected with a ConversationItem."""

    async def show(self, conversations: Sequence[Conversation], *, current: int | None) -> None:
        await self.clear()
        await self.extend(ConversationItem(conversation) for conversation in conversations)
        ids = [c.id for c in conversations]
        if current in ids:
            self.index = ids.index(current)
