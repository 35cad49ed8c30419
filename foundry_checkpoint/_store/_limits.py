"""The state store's documented limits and the environment variables the store layer reads.

Every module that checks a limit, pages a listing or reads one of these variables imports the
constant from here, so the engine, the emulator, the naming rules and the adapters cannot drift
apart.

Example:
    >>> MAX_NAME, MAX_TAG_VALUE, MAX_VALUE_BYTES, MAX_TTL_SECONDS, MAX_PAGE
    (128, 256, 1000000, 2147483647, 100)
    >>> STATE_ROOT_ENV
    'AGENTSERVER_STATE_ROOT'
"""

from __future__ import annotations

from typing import Final

from azure.ai.agentserver.core.storage import DEFAULT_ITEM_TTL_SECONDS as _SDK_DEFAULT_TTL

__all__ = [
    "DEFAULT_ITEM_TTL_SECONDS",
    "DEFAULT_PAGE",
    "DEFAULT_ROOT_DIRNAME",
    "HOSTING_ENV",
    "MAX_DESCRIPTION",
    "MAX_NAME",
    "MAX_PAGE",
    "MAX_TAGS",
    "MAX_TAG_KEY",
    "MAX_TAG_VALUE",
    "MAX_TTL_SECONDS",
    "MAX_VALUE_BYTES",
    "PROJECT_ENDPOINT_ENV",
    "STATE_ROOT_ENV",
]

#: Store names and item keys: 1 to this many characters.
MAX_NAME: Final = 128
#: Tag values: at most this many characters.
MAX_TAG_VALUE: Final = 256
#: Tag keys: 1 to this many characters of ``[a-zA-Z0-9_.-]``.
MAX_TAG_KEY: Final = 64
#: Tags per item.
MAX_TAGS: Final = 16
#: A store's description: at most this many characters.
MAX_DESCRIPTION: Final = 1024
#: An item value: at most this many bytes of ``json.dumps(value)`` in UTF-8. The documented
#: limit is "1 MB", which no public text pins to 10**6 or 2**20 bytes (one client enforces
#: 2**20): the stricter reading holds here, so nothing that passes locally or against the
#: emulator can be refused by a service that reads it as 10**6.
MAX_VALUE_BYTES: Final = 1_000_000
#: ``item_ttl_seconds``: -1 (never expire) or 1 to this (2**31 - 1).
MAX_TTL_SECONDS: Final = 2**31 - 1
#: The largest page ``list_keys`` answers (``limit`` 1 to this).
MAX_PAGE: Final = 100
#: The page size ``list_keys`` uses when no ``limit`` is given.
DEFAULT_PAGE: Final = 20
#: ``item_ttl_seconds`` when none is given (the SDK's and the service's default: 30 days).
DEFAULT_ITEM_TTL_SECONDS: Final[int] = _SDK_DEFAULT_TTL

#: Set inside a Foundry-hosted agent: selects the hosted state store.
HOSTING_ENV: Final = "FOUNDRY_HOSTING_ENVIRONMENT"
#: The Foundry project endpoint of hosted mode.
PROJECT_ENDPOINT_ENV: Final = "FOUNDRY_PROJECT_ENDPOINT"
#: The folder local state lives under (the SDK's own variable).
STATE_ROOT_ENV: Final = "AGENTSERVER_STATE_ROOT"
#: The state root under the home folder when :data:`STATE_ROOT_ENV` is unset.
DEFAULT_ROOT_DIRNAME: Final = ".agentserver"
