"""Deterministic fault injection: what to do to the next requests of a given call type.

A :class:`Fault` is a rule ("answer the next two ``put_item`` calls with 429"; "hold every
request of user ``u-7`` for 2 s"). The emulator consults its :class:`FaultPlan` after routing a
request and before touching the engine, so a faulted request never changes state. A rule may
be narrowed to one user (the partition the request resolves to: its call id's user, else its
token's) or one store name, so that one conversation can be stalled while the others run.
Random choices (``probability`` below 1) come from one ``random.Random`` seeded by the
emulator's seed, so a test run replays the same faults.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Final

from foundry_checkpoint.errors import InvalidArgumentError

__all__ = ["CALL_TYPES", "Fault", "FaultPlan"]

#: The calls of the wire contract, by the names used for routing, counting and faults: the nine
#: the SDK's client makes, and the public spec's list of stores.
CALL_TYPES: Final[tuple[str, ...]] = (
    "list_stores",
    "get_store",
    "create_store",
    "update_store",
    "delete_store",
    "create_item",
    "put_item",
    "get_item",
    "delete_item",
    "list_keys",
)


@dataclass(frozen=True)
class Fault:
    """One fault rule.

    A matching request waits ``delay`` seconds and then either loses its connection
    (``drop=True``), gets an error response with ``status`` (and a ``Retry-After`` header only
    when ``retry_after`` is not None), or, with ``status=None`` and ``drop=False``, goes on to be
    served normally (a pure delay).

    Args:
        route: A call type from :data:`CALL_TYPES`, or ``"*"`` for every call.
        status: An HTTP error status (400-599), or None for a pure delay or a drop.
        retry_after: Seconds for the ``Retry-After`` header; None sends no header.
        drop: Close the connection without a response.
        delay: Seconds to wait before the fault is served.
        times: How many matching requests the rule applies to; None for every one.
        probability: The chance, in (0, 1], that a matching request is faulted.
        user: Only requests that resolve to this user (None: any user). A request whose
            caller cannot be resolved (it will be refused) matches no such rule.
        store: Only requests on the store of this name, decoded (None: any store, and calls
            that name no store).

    Raises:
        InvalidArgumentError: (a ``ValueError``) an unknown route or an out-of-range value.

    Example:
        >>> Fault("put_item", status=429, retry_after=0.0, times=2).times
        2
        >>> Fault(status=None, delay=2.0, times=None, user="u-7").matches("get_item", user="u-8")
        False
    """

    route: str = "*"
    status: int | None = 503
    retry_after: float | None = None
    drop: bool = False
    delay: float = 0.0
    times: int | None = 1
    probability: float = 1.0
    user: str | None = None
    store: str | None = None

    def __post_init__(self) -> None:
        if self.route != "*" and self.route not in CALL_TYPES:
            choices = ", ".join(CALL_TYPES)
            raise InvalidArgumentError(f"route must be '*' or one of {choices}; got {self.route!r}")
        if self.status is not None and not 400 <= self.status <= 599:
            raise InvalidArgumentError(
                f"status must be an HTTP error status or None; got {self.status}"
            )
        if self.retry_after is not None and self.retry_after < 0:
            raise InvalidArgumentError("retry_after must be >= 0 or None")
        if self.delay < 0:
            raise InvalidArgumentError("delay must be >= 0")
        if self.times is not None and self.times < 1:
            raise InvalidArgumentError("times must be >= 1 or None (unlimited)")
        if not 0.0 < self.probability <= 1.0:
            raise InvalidArgumentError("probability must be in (0, 1]")
        for name in ("user", "store"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidArgumentError(f"{name} must be a non-empty string or None")

    @property
    def scoped(self) -> bool:
        """Whether the rule is narrowed to one user or one store."""
        return self.user is not None or self.store is not None

    def matches(self, call_type: str, *, user: str | None = None, store: str | None = None) -> bool:
        """Whether a request of ``call_type`` for ``user`` on ``store`` falls under this rule.

        Args:
            call_type: The request's call type.
            user: The user the request resolves to, or None when unknown.
            store: The decoded store name of the request, or None when it names none.

        Returns:
            True when the route, and the user and store the rule names (if any), all match.
        """
        if self.route not in ("*", call_type):
            return False
        if self.user is not None and self.user != user:
            return False
        return self.store is None or self.store == store

    def retry_after_header(self) -> str | None:
        """Spell :attr:`retry_after` as an HTTP header value.

        Returns:
            The ``Retry-After`` header value (whole seconds without a fraction), or None when
            no header is sent.
        """
        if self.retry_after is None:
            return None
        if float(self.retry_after).is_integer():
            return str(int(self.retry_after))
        return repr(float(self.retry_after))


@dataclass
class _Armed:
    fault: Fault
    remaining: int | None = field(default=None)


class FaultPlan:
    """The active fault rules, safe to change from any thread while the server runs.

    Rules are tried in the order they were added; the first one that matches (call type, and
    the user and store it names, if any), has uses left and wins its probability draw is
    served: arm a narrowed rule before a catch-all one to give that user another treatment.

    Args:
        seed: Seeds the draws of rules whose ``probability`` is below 1.

    Example:
        >>> plan = FaultPlan(seed=0)
        >>> _ = plan.add(Fault("get_item", status=500))
        >>> plan.take("put_item") is None, plan.take("get_item") is not None, plan.take("get_item")
        (True, True, None)
    """

    def __init__(self, *, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._armed: list[_Armed] = []
        self._scoped = False

    def add(self, fault: Fault) -> Fault:
        """Arm a fault rule after the ones already armed.

        Args:
            fault: The rule.

        Returns:
            ``fault`` itself.
        """
        with self._lock:
            self._armed.append(_Armed(fault, fault.times))
            self._scoped = any(armed.fault.scoped for armed in self._armed)
        return fault

    def clear(self) -> None:
        """Disarm every rule."""
        with self._lock:
            self._armed.clear()
            self._scoped = False

    @property
    def scoped(self) -> bool:
        """Whether an armed rule names a user or a store (the server then resolves both)."""
        return self._scoped

    def pending(self) -> list[tuple[Fault, int | None]]:
        """List the armed rules.

        Returns:
            Each armed rule with its remaining uses (None: unlimited), in the order tried.
        """
        with self._lock:
            return [(armed.fault, armed.remaining) for armed in self._armed]

    def take(
        self, call_type: str, *, user: str | None = None, store: str | None = None
    ) -> Fault | None:
        """Pick the rule for one request, using up one of its uses.

        Args:
            call_type: The request's call type (one of :data:`CALL_TYPES`).
            user: The user the request resolves to (None: unknown; no user rule matches).
            store: The decoded store name of the request (None: it names none).

        Returns:
            The first armed rule that matches and wins its draw, or None.
        """
        with self._lock:
            for armed in self._armed:
                fault = armed.fault
                if not fault.matches(call_type, user=user, store=store):
                    continue
                if fault.probability < 1.0 and self._random.random() >= fault.probability:
                    continue
                if armed.remaining is not None:
                    armed.remaining -= 1
                    if armed.remaining == 0:
                        self._armed.remove(armed)
                        self._scoped = any(a.fault.scoped for a in self._armed)
                return fault
        return None
