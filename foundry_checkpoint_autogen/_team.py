"""AgentChat teams in the store: ``save_team``/``load_team`` and ``TeamSession``.

A team's ``save_state()`` (agentchat's ``TeamState``) is keyed by participant names and the
group chat manager, so it moves between team objects built the same way; it is stored under
``(conversation_id, "team", <team name>)``. ``runtime.save_state()`` of the team's runtime is
not used: its keys hold a random team id, and loading it into a new team object restores
nothing, silently. A team state grows with the conversation (each message is kept about
``1 + participants`` times), so long conversations pass the 1 MB item limit and spill.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

from autogen_agentchat.base import TaskResult, Team
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage

from ._store import AutoGenStateStore

__all__ = ["TEAM_KIND", "TeamSession", "load_team", "save_team"]

#: The ``kind`` under which team states are stored.
TEAM_KIND: Final = "team"

Task = str | BaseChatMessage | Sequence[BaseChatMessage] | None


def _team_name(team: Team, name: str | None) -> str:
    if name is not None:
        return name
    found = getattr(team, "name", None)
    return found if isinstance(found, str) and found else type(team).__name__


async def save_team(
    team: Team, store: AutoGenStateStore, conversation_id: str, *, name: str | None = None
) -> str:
    """Save ``team.save_state()`` as a new version of ``(conversation_id, "team", name)``.

    ``name`` defaults to the team's name (``RoundRobinGroupChat(..., name=...)``, else its
    class name): teams of one conversation need distinct names.

    Args:
        team: The team (``RoundRobinGroupChat``, ``SelectorGroupChat``, ...).
        store: Where the state is saved.
        conversation_id: The scope the state is kept in.
        name: The name the team's state is kept under; the team's own name by default.

    Returns:
        The id of the new version.

    Example:
        >>> import asyncio
        >>> from autogen_agentchat.agents import AssistantAgent
        >>> from autogen_agentchat.teams import RoundRobinGroupChat
        >>> from autogen_ext.models.replay import ReplayChatCompletionClient
        >>> async def demo(store: AutoGenStateStore) -> list[str]:
        ...     client = ReplayChatCompletionClient(["hi there"])
        ...     team = RoundRobinGroupChat([AssistantAgent("a", model_client=client)], max_turns=1)
        ...     await team.run(task="hello")
        ...     await save_team(team, store, "conv-7")
        ...     fresh = RoundRobinGroupChat([AssistantAgent("a", model_client=client)], max_turns=1)
        ...     await load_team(fresh, store, "conv-7")
        ...     state = await fresh.save_state()
        ...     return [m["content"] for m in state["agent_states"]["a"]["agent_state"]
        ...             ["llm_context"]["messages"]]
        >>> with AutoGenStateStore() as store:
        ...     asyncio.run(demo(store))
        ['hello', 'hi there']
    """
    state = await team.save_state()
    return await store.asave(conversation_id, TEAM_KIND, _team_name(team, name), state)


async def load_team(
    team: Team,
    store: AutoGenStateStore,
    conversation_id: str,
    *,
    name: str | None = None,
    version: str | None = None,
) -> bool:
    """Load a saved state into ``team``.

    Args:
        team: The team to load into (built as the saved one was).
        store: Where the state was saved.
        conversation_id: The scope the state is kept in.
        name: The name the team's state is kept under; the team's own name by default.
        version: The version to load; None for the latest.

    Returns:
        True when a state was loaded, False when none was saved.

    Example:
        >>> import asyncio
        >>> from autogen_agentchat.agents import AssistantAgent
        >>> from autogen_agentchat.teams import RoundRobinGroupChat
        >>> from autogen_ext.models.replay import ReplayChatCompletionClient
        >>> team = RoundRobinGroupChat(
        ...     [AssistantAgent("a", model_client=ReplayChatCompletionClient([]))], max_turns=1)
        >>> with AutoGenStateStore() as store:
        ...     asyncio.run(load_team(team, store, "never-saved"))
        False
    """
    state = await store.aload(conversation_id, TEAM_KIND, _team_name(team, name), version=version)
    if state is None:
        return False
    await team.load_state(state)
    return True


class TeamSession:
    """Runs a team of one conversation, resuming it from the store and saving after each run.

    The first ``run()``/``run_stream()`` loads the latest saved state of
    ``(conversation_id, "team", name)`` into ``team`` (once per session); each run that
    completes saves the team's state as a new version. A run that raises, or a stream the
    caller stops reading early, saves nothing.

    Args:
        team: The team of the conversation.
        store: Where its state is kept.
        conversation_id: The scope the state is kept in.
        name: The name the team's state is kept under; the team's own name by default.

    Raises:
        TypeError: ``store`` is not an ``AutoGenStateStore``.
        InvalidIdentifierError: ``conversation_id`` is not a usable identifier.

    Example:
        >>> import asyncio
        >>> from autogen_agentchat.agents import AssistantAgent
        >>> from autogen_agentchat.teams import RoundRobinGroupChat
        >>> from autogen_ext.models.replay import ReplayChatCompletionClient
        >>> def make_team(*replies: str) -> RoundRobinGroupChat:
        ...     client = ReplayChatCompletionClient(list(replies))
        ...     return RoundRobinGroupChat([AssistantAgent("a", model_client=client)], max_turns=1)
        >>> async def process(store: AutoGenStateStore, reply: str) -> int:
        ...     session = TeamSession(make_team(reply), store, "conv-9")
        ...     await session.run(task="next")
        ...     state = await session.team.save_state()
        ...     return len(state["agent_states"]["a"]["agent_state"]["llm_context"]["messages"])
        >>> with AutoGenStateStore() as store:                     # two "processes"
        ...     asyncio.run(process(store, "one")), asyncio.run(process(store, "two"))
        (2, 4)
    """

    def __init__(
        self,
        team: Team,
        store: AutoGenStateStore,
        conversation_id: str,
        *,
        name: str | None = None,
    ) -> None:
        from foundry_checkpoint.adapter import check_identifier

        if not isinstance(store, AutoGenStateStore):
            raise TypeError(f"store must be an AutoGenStateStore, got {type(store).__name__}")
        self._team = team
        self._store = store
        self._conversation_id = check_identifier(conversation_id, "conversation_id")
        self._name = _team_name(team, name)
        self._loaded = False
        self._lock: asyncio.Lock | None = None
        self._last_version: str | None = None

    @property
    def team(self) -> Team:
        """The team this session runs."""
        return self._team

    @property
    def conversation_id(self) -> str:
        """The conversation (store scope) the team's state is kept in."""
        return self._conversation_id

    @property
    def last_version(self) -> str | None:
        """The version id of the last save by this session (None before the first)."""
        return self._last_version

    async def resume(self) -> bool:
        """Load the latest saved state now, if this session has not loaded it yet.

        Returns:
            True when a state was found and loaded, False otherwise (or when already loaded).
        """
        if self._loaded:
            return False
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._loaded:
                return False
            found = await load_team(self._team, self._store, self._conversation_id, name=self._name)
            self._loaded = True
            return found

    async def save(self) -> str:
        """Save the team's current state as a new version.

        Returns:
            The id of the new version (also :attr:`last_version`).
        """
        self._last_version = await save_team(
            self._team, self._store, self._conversation_id, name=self._name
        )
        return self._last_version

    async def run(self, *, task: Task = None, **kwargs: Any) -> TaskResult:
        """Run ``team.run(task=..., **kwargs)`` after resuming; save when it completes.

        Args:
            task: The task, as for ``team.run``.
            **kwargs: Passed to ``team.run`` (``cancellation_token``, ...).

        Returns:
            The team's ``TaskResult``.
        """
        await self.resume()
        result = await self._team.run(task=task, **kwargs)
        await self.save()
        return result

    async def run_stream(
        self, *, task: Task = None, **kwargs: Any
    ) -> AsyncGenerator[BaseAgentEvent | BaseChatMessage | TaskResult, None]:
        """Stream ``team.run_stream(task=..., **kwargs)`` after resuming; save when it completes.

        Args:
            task: The task, as for ``team.run_stream``.
            **kwargs: Passed to ``team.run_stream``.

        Yields:
            The team's events and messages, then its ``TaskResult``.
        """
        await self.resume()
        async for item in self._team.run_stream(task=task, **kwargs):
            yield item
        await self.save()
