"""The emulator's test credential and the token-to-user mapping it relies on.

A token minted by :class:`EmulatorCredential` names its user, so the emulator can partition an
isolated store by that user the way the hosted service partitions by the caller's identity. Any
other bearer token still works: it maps to a partition derived from the token itself, so two
different tokens never share a partition by accident.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from types import TracebackType
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.credentials_async import AsyncTokenCredential

from foundry_checkpoint.errors import InvalidArgumentError

__all__ = ["EmulatorCredential", "token_for_user", "user_for_token"]

_TOKEN_PREFIX = "foundry-emulator-user."
_TOKEN_LIFETIME_SECONDS = 3600


def token_for_user(user: str) -> str:
    """Make the bearer token the emulator maps back to ``user``.

    Args:
        user: The user name the token stands for.

    Returns:
        The token text (its prefix, then the user name in base64url).

    Example:
        >>> user_for_token(token_for_user("alice"))
        'alice'
    """
    encoded = base64.urlsafe_b64encode(user.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{_TOKEN_PREFIX}{encoded}"


def user_for_token(token: str) -> str:
    """Find the partition user for a bearer token.

    Args:
        token: A bearer token, from :func:`token_for_user` or anywhere else.

    Returns:
        The user name for tokens minted by :func:`token_for_user`; for any other token, a
        stable name derived from a digest of the token.

    Example:
        >>> user_for_token("some-opaque-token").startswith("token-")
        True
    """
    if token.startswith(_TOKEN_PREFIX):
        encoded = token[len(_TOKEN_PREFIX) :]
        try:
            user = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            user = ""
        if user and token_for_user(user) == token:
            return user
    return "token-" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


class EmulatorCredential(AsyncTokenCredential):
    """An async token credential whose tokens the emulator maps to one user name.

    Pass it as ``credential=`` to ``FoundryStateStore`` when talking to a
    :class:`~foundry_checkpoint.emulator.FoundryEmulator`; items written to a store with
    ``user_isolation=True`` land in that user's partition.

    Args:
        user: The user name the credential's tokens stand for.

    Raises:
        InvalidArgumentError: (a ``ValueError``) ``user`` is empty.

    Example:
        >>> import asyncio
        >>> async def demo() -> str:
        ...     async with EmulatorCredential("alice") as credential:
        ...         token = await credential.get_token("https://ai.azure.com/.default")
        ...     return user_for_token(token.token)
        >>> asyncio.run(demo())
        'alice'
    """

    def __init__(self, user: str) -> None:
        if not user:
            raise InvalidArgumentError("user must be a non-empty string")
        self._user = user
        self._token = token_for_user(user)

    @property
    def user(self) -> str:
        """The user name this credential's tokens stand for."""
        return self._user

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        """Get a token valid for an hour.

        Args:
            *scopes: Accepted and ignored.
            claims: Accepted and ignored.
            tenant_id: Accepted and ignored.
            enable_cae: Accepted and ignored.
            **kwargs: Accepted and ignored.

        Returns:
            A token the emulator maps back to :attr:`user`.
        """
        return AccessToken(self._token, int(time.time()) + _TOKEN_LIFETIME_SECONDS)

    async def close(self) -> None:
        """Release nothing: the credential holds no resources."""

    async def __aenter__(self) -> EmulatorCredential:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"EmulatorCredential(user={self._user!r})"
