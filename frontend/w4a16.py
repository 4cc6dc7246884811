"""``hipskinny.w4a16``: AWQ / GPTQ int4 checkpoints (`hipskinny.formats.w4a16`: prepare, unprepare, the
prepared layout) and `linear`, the op on them (`hipskinny.ops.w4a16_linear`)."""

from __future__ import annotations

from typing import Any

from .formats.w4a16 import *  # noqa: F403  (the format's public names)
from .formats.w4a16 import __all__ as _FORMAT

__all__ = [*_FORMAT, "linear"]  # noqa: F405  (the op: `__getattr__`)


def __getattr__(attr: str) -> Any:      # the op on first use: importing the format loads no kernel code
    if attr == "linear":
        from .ops.w4a16_linear import w4a16_linear

        globals()[attr] = w4a16_linear
        return w4a16_linear
    raise AttributeError(f"module 'hipskinny.w4a16' has no attribute {attr!r}")
