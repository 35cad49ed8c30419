"""What the LangGraph saver reads from a ``RunnableConfig``, checked.

Every public call names its thread (and maybe a namespace and a checkpoint id) in
``config["configurable"]``; a missing or malformed value is an
:class:`~foundry_checkpoint.errors.InvalidIdentifierError` before any I/O. The saver parses a
call's config once, at its public method, into an :class:`Address` that the operations take
(they never read the config's identifiers again).

Example:
    >>> conf = {"configurable": {"thread_id": 7, "checkpoint_ns": "child"}}
    >>> thread_id(conf), namespace(configurable(conf)), wanted_id(conf)
    ('7', 'child', None)
    >>> address(conf)
    Address(thread_id='7', ns='child', checkpoint_id=None, ns_given=True)
    >>> matches({"source": "loop", "step": 1}, {"step": 1})
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import get_checkpoint_id

from ..adapter import check_identifier, check_text
from ..errors import InvalidIdentifierError

__all__ = [
    "Address",
    "address",
    "check_thread",
    "configurable",
    "matches",
    "namespace",
    "thread_id",
    "wanted_id",
]


@dataclass(frozen=True, slots=True)
class Address:
    """What a config names, checked once: a thread, a namespace and maybe a checkpoint.

    ``checkpoint_id`` is None when the config names none (absent or empty); ``ns_given`` says
    whether it named a namespace at all (``list`` filters by it only then).

    Example:
        >>> Address("t-1", "", "1ef").checkpoint_id
        '1ef'
    """

    thread_id: str
    ns: str
    checkpoint_id: str | None = None
    ns_given: bool = False


def address(config: RunnableConfig | None) -> Address:
    """The checked :class:`Address` of ``config``: each identifier checked once, here.

    Args:
        config: a LangGraph config.

    Returns:
        The address.

    Raises:
        InvalidIdentifierError: the thread id is missing or not valid text, or the namespace
            or checkpoint id is not text.
    """
    conf = configurable(config)
    thread = _thread_of(conf)
    ns = namespace(conf)
    wanted = conf.get("checkpoint_id")
    checked = None if wanted is None else check_text(wanted, "checkpoint_id")
    return Address(thread, ns, checked or None, conf.get("checkpoint_ns") is not None)


def configurable(config: RunnableConfig | None) -> Mapping[str, Any]:
    """The ``configurable`` section of ``config``.

    Args:
        config: a LangGraph config.

    Returns:
        The section, as given.

    Raises:
        InvalidIdentifierError: ``config`` has no ``configurable`` mapping.
    """
    conf = (config or {}).get("configurable")
    if not isinstance(conf, Mapping):
        raise InvalidIdentifierError(
            "the config has no 'configurable' section; pass "
            "{'configurable': {'thread_id': '<your thread id>'}}"
        )
    return conf


def thread_id(config: RunnableConfig | None) -> str:
    """The checked ``thread_id`` of ``config`` (an int or a UUID becomes its text).

    Args:
        config: a LangGraph config.

    Returns:
        The thread id.

    Raises:
        InvalidIdentifierError: the thread id is missing or not valid text.
    """
    return _thread_of(configurable(config))


def _thread_of(conf: Mapping[str, Any]) -> str:
    """The checked ``thread_id`` of a ``configurable`` section."""
    if "thread_id" not in conf or conf["thread_id"] is None:
        raise InvalidIdentifierError(
            "config['configurable']['thread_id'] is missing: a checkpointer stores state per "
            "thread, so pass {'configurable': {'thread_id': '<your thread id>'}}"
        )
    return check_thread(conf["thread_id"])


def check_thread(value: object) -> str:
    """``value`` as a thread id: text, or an int or UUID as text.

    Args:
        value: what the caller passed as a thread id.

    Returns:
        The thread id.

    Raises:
        InvalidIdentifierError: ``value`` is empty or not valid text.
    """
    if isinstance(value, (int, UUID)) and not isinstance(value, bool):
        value = str(value)
    return check_identifier(value, "thread_id")


def wanted_id(config: RunnableConfig) -> str | None:
    """The config's ``checkpoint_id`` (None when absent), checked to be encodable text."""
    wanted = get_checkpoint_id(config)
    return None if wanted is None else check_text(wanted, "checkpoint_id")


def namespace(conf: Mapping[str, Any]) -> str:
    """The ``checkpoint_ns`` of a ``configurable`` section (``""``: the root namespace)."""
    return check_text(conf.get("checkpoint_ns") or "", "checkpoint_ns")


def matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """True when ``metadata`` has every key of ``wanted`` with an equal value."""
    return all(metadata.get(k) == v for k, v in wanted.items())
