"""The release of foundry-checkpoint: the one place it is written (hatchling reads it too).

Example:
    >>> from foundry_checkpoint._version import __version__
    >>> __version__.count(".") >= 2
    True
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
