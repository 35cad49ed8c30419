"""Deterministic fault injection: what to do to the next requests of a given call type.

A :class:`Fault` is a rule ("answer the next two ``put_item`` calls with 429"). The emulator
consults its :class:`FaultPlan` after routing a request and before touching the engine, so a
faulted request never changes state. Random choices (``probability`` below 1) come from one
``random.Random`` seeded by the emulator's seed, so a test run replays the same faults.
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

    Raises:
        InvalidArgumentError: (a ``ValueError``) an unknown route or an out-of-range value.

    Example:
        >>> Fault("put_item", status=429, retry_after=0.0, times=2).times
        2
    """

    route: str = "*"
    status: int | None = 503
    retry_after: float | None = None
    drop: bool = False
    delay: float = 0.0
    times: int | None = 1
    probability: float = 1.0

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

    Rules are tried in the order they were added; the first one that matches the call type, has
    uses left and wins its probability draw is served.

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

    def add(self, fault: Fault) -> Fault:
        """Arm a fault rule after the ones already armed.

        Args:
            fault: The rule.

        Returns:
            ``fault`` itself.
        """
        with self._lock:
            self._armed.append(_Armed(fault, fault.times))
        return fault

    def clear(self) -> None:
        """Disarm every rule."""
        with self._lock:
            self._armed.clear()

    def pending(self) -> list[tuple[Fault, int | None]]:
        """List the armed rules.

        Returns:
            Each armed rule with its remaining uses (None: unlimited), in the order tried.
        """
        with self._lock:
            return [(armed.fault, armed.remaining) for armed in self._armed]

    def take(self, call_type: str) -> Fault | None:
        """Pick the rule for one request, using up one of its uses.

        Args:
            call_type: The request's call type (one of :data:`CALL_TYPES`).

        Returns:
            The first armed rule that matches and wins its draw, or None.
        """
        with self._lock:
            for armed in self._armed:
                fault = armed.fault
                if fault.route not in ("*", call_type):
                    continue
                if fault.probability < 1.0 and self._random.random() >= fault.probability:
                    continue
                if armed.remaining is not None:
                    armed.remaining -= 1
                    if armed.remaining == 0:
                        self._armed.remove(armed)
                return fault
        return None
