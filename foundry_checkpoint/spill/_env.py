"""The environment variables that configure an :class:`~._azure.AzureBlobSpill`.

Kept apart from ``_azure`` so that the checkpointers can see whether a blob spill store is
configured without importing azure-core's storage clients (local mode never needs them).

Example:
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {ENV_ACCOUNT_URL: " "}, clear=True):
    ...     blob_env_configured()
    False
    >>> with mock.patch.dict(os.environ, {ENV_CONNECTION_STRING: "UseDevelopmentStorage=true"}):
    ...     blob_env_configured()
    True
"""

from __future__ import annotations

import os
from typing import Final

__all__ = [
    "ENV_ACCOUNT_URL",
    "ENV_CONNECTION_STRING",
    "ENV_CONTAINER",
    "ENV_PREFIX",
    "blob_env_configured",
]

ENV_CONNECTION_STRING: Final = "FOUNDRY_CHECKPOINT_BLOB_CONNECTION_STRING"
ENV_ACCOUNT_URL: Final = "FOUNDRY_CHECKPOINT_BLOB_ACCOUNT_URL"
ENV_CONTAINER: Final = "FOUNDRY_CHECKPOINT_BLOB_CONTAINER"
ENV_PREFIX: Final = "FOUNDRY_CHECKPOINT_BLOB_PREFIX"


def blob_env_configured() -> bool:
    """Whether a connection string or an account URL is set (unset and blank alike: no)."""
    return any(
        os.environ.get(name, "").strip() for name in (ENV_CONNECTION_STRING, ENV_ACCOUNT_URL)
    )
