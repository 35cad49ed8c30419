"""Who a request is for: the emulator's one caller-resolution rule.

A Foundry-hosted agent is one process serving many end users. The platform mints an opaque
call id per inbound request (``x-agent-foundry-call-id``); the container forwards it on every
state-store call (``FoundryStateStore`` adds it from ``get_request_context()``), and the service
resolves the caller, hence the isolation partition, from it. The emulator models that with a
table of call ids bound to users (:meth:`CallTable.bind`, :meth:`CallTable.mint`).

:func:`resolve_caller` is the only place the emulator decides whose partition a request reads
or writes. In order:

1. ``Authorization: Bearer <token>`` is required on every request (missing: 401). It
   authenticates the container, as the managed identity does on the service.
2. ``x-agent-foundry-call-id``, when present and non-empty: the user bound to that call id. A
   call id the emulator never bound is refused with **403** ``caller_context_not_found``: the
   container is authenticated (its token is valid) but the caller context it claims to act for
   does not exist, so the request is not allowed; retrying with the same token cannot succeed.
3. ``x-ms-user-id`` (the delegated user a caller names with ``user_id=``; the SDK sends it on
   item calls only), **only when the caller is trusted** (:meth:`CallTable.trust`). The SDK's
   own TypeSpec (``DelegatedUserIdHeader`` in azure-ai-agentserver-core's
   ``type_spec/main.tsp``) says the header is "honored only for trusted (S2S/managed-identity)
   callers; ignored otherwise (falls back to hash(oid, tid))", and the public REST draft for
   state stores drops caller-supplied identity, so by default the emulator ignores it, as the
   service would for an ordinary caller. Trusting ``"*"`` honours it from every caller (the
   emulator's behaviour before this rule).
4. The bearer token itself (the caller): a token minted by
   :class:`~foundry_checkpoint.emulator.EmulatorCredential` names its user; any other token maps
   to a partition derived from a digest of the token.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Mapping
from typing import Final

from foundry_checkpoint.errors import InvalidArgumentError

from ._credential import user_for_token

__all__ = [
    "ANY_CALLER",
    "CALL_ID_HEADER",
    "DELEGATED_USER_HEADER",
    "CallTable",
    "CallerRejected",
    "resolve_caller",
]

#: The platform's per-request call id header, forwarded by the SDK from the request context.
CALL_ID_HEADER: Final = "x-agent-foundry-call-id"
#: The delegated end-user header the SDK sends on item calls when ``user_id=`` is given.
DELEGATED_USER_HEADER: Final = "x-ms-user-id"
#: Trusting this caller name trusts every caller's ``x-ms-user-id``.
ANY_CALLER: Final = "*"
#: Status and error code of a call id that no binding resolves.
UNKNOWN_CALL_STATUS: Final = 403
UNKNOWN_CALL_CODE: Final = "caller_context_not_found"


class CallerRejected(Exception):
    """The request names no caller the emulator can resolve.

    Args:
        status: The HTTP status to answer (401 or 403).
        code: The error code of the answer's body.
        message: The error message of the answer's body.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class CallTable:
    """What the platform knows about callers: call ids bound to users, and the callers trusted
    to delegate (whose ``x-ms-user-id`` is honoured); safe to change from any thread while the
    server runs.

    Args:
        trusted: Callers (the users their bearer tokens name) trusted to delegate; ``"*"``
            trusts every caller. None trusts nobody (the default, strict mode).

    Example:
        >>> calls = CallTable()
        >>> calls.bind("call-1", "alice")
        >>> calls.user_for("call-1"), calls.user_for("call-2")
        ('alice', None)
        >>> calls.user_for(calls.mint("bob"))
        'bob'
        >>> calls.trusts("frontdoor"), CallTable(trusted=["frontdoor"]).trusts("frontdoor")
        (False, True)
    """

    def __init__(self, trusted: Iterable[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, str] = {}
        self._trusted: set[str] = set()
        for caller in trusted or ():
            self.trust(caller)

    def trust(self, caller: str) -> None:
        """Honour ``x-ms-user-id`` from ``caller`` (the user its bearer token names; ``"*"``: any).

        Args:
            caller: The trusted caller's name, or ``"*"``.

        Raises:
            InvalidArgumentError: (a ``ValueError``) an empty or non-string ``caller``.
        """
        if not isinstance(caller, str) or not caller.strip():
            raise InvalidArgumentError(f"caller must be a non-empty string; got {caller!r}")
        with self._lock:
            self._trusted.add(caller)

    def distrust(self, caller: str) -> None:
        """Stop honouring ``x-ms-user-id`` from ``caller`` (nothing when it was not trusted).

        Args:
            caller: A name passed to :meth:`trust`.
        """
        with self._lock:
            self._trusted.discard(caller)

    def trusts(self, caller: str) -> bool:
        """Whether ``caller``'s ``x-ms-user-id`` is honoured.

        Args:
            caller: The user a bearer token names.

        Returns:
            True when ``caller`` (or every caller, ``"*"``) is trusted.
        """
        with self._lock:
            return caller in self._trusted or ANY_CALLER in self._trusted

    @property
    def trusted(self) -> frozenset[str]:
        """The trusted callers (``"*"``: every caller)."""
        with self._lock:
            return frozenset(self._trusted)

    def bind(self, call_id: str, user: str) -> None:
        """Make requests carrying ``call_id`` resolve to ``user``.

        Binding a call id again to the same user does nothing; to another user it raises, since
        the platform never reuses a call id for someone else.

        Args:
            call_id: The value of the ``x-agent-foundry-call-id`` header.
            user: The user whose partition such requests read and write.

        Raises:
            InvalidArgumentError: (a ``ValueError``) an empty or non-string ``call_id`` or
                ``user``, or ``call_id`` is already bound to another user.
        """
        if not isinstance(call_id, str) or not call_id.strip():
            raise InvalidArgumentError(f"call_id must be a non-empty string; got {call_id!r}")
        if not isinstance(user, str) or not user:
            raise InvalidArgumentError(f"user must be a non-empty string; got {user!r}")
        with self._lock:
            bound = self._users.setdefault(call_id, user)
        if bound != user:
            raise InvalidArgumentError(
                f"call id {call_id!r} is already bound to user {bound!r}; mint a new call id for "
                f"{user!r} (the platform never reuses one)"
            )

    def mint(self, user: str) -> str:
        """Mint a fresh call id bound to ``user``.

        Args:
            user: The user the call id resolves to.

        Returns:
            The new call id.

        Raises:
            InvalidArgumentError: (a ``ValueError``) ``user`` is empty or not a string.
        """
        call_id = f"call-{secrets.token_hex(16)}"
        self.bind(call_id, user)
        return call_id

    def user_for(self, call_id: str) -> str | None:
        """Look up the user a call id is bound to.

        Args:
            call_id: The call id.

        Returns:
            The bound user, or None.
        """
        with self._lock:
            return self._users.get(call_id)


def resolve_caller(headers: Mapping[str, str], calls: CallTable) -> str:
    """Find the user whose partition a request reads and writes.

    The rule (module docstring): bearer token required; then the call id's bound user (unknown
    call id: 403), else the delegated ``x-ms-user-id`` when the token's caller is trusted, else
    the token's user.

    Args:
        headers: The request's headers.
        calls: The call ids bound to users.

    Returns:
        The user name.

    Raises:
        CallerRejected: 401 without a bearer token, 403 for a call id nobody bound.

    Example:
        >>> from foundry_checkpoint.emulator._credential import token_for_user
        >>> calls = CallTable()
        >>> calls.bind("c1", "bob")
        >>> auth = {"Authorization": f"Bearer {token_for_user('svc')}"}
        >>> resolve_caller(auth, calls)
        'svc'
        >>> resolve_caller({**auth, "x-ms-user-id": "carol"}, calls)  # not trusted: ignored
        'svc'
        >>> calls.trust("svc")
        >>> resolve_caller({**auth, "x-ms-user-id": "carol"}, calls)
        'carol'
        >>> resolve_caller({**auth, "x-ms-user-id": "carol", CALL_ID_HEADER: "c1"}, calls)
        'bob'
    """
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise CallerRejected(401, "unauthorized", "A bearer token is required.")
    call_id = headers.get(CALL_ID_HEADER, "").strip()
    if call_id:
        user = calls.user_for(call_id)
        if user is None:
            raise CallerRejected(
                UNKNOWN_CALL_STATUS,
                UNKNOWN_CALL_CODE,
                f"The caller context of call id {call_id!r} was not found; forward the "
                f"{CALL_ID_HEADER} the platform sent with the current request.",
            )
        return user
    caller = user_for_token(token)
    delegated = headers.get(DELEGATED_USER_HEADER)
    if delegated and calls.trusts(caller):
        return delegated
    return caller
