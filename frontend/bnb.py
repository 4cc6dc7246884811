"""``hipskinny.bnb``: bitsandbytes' 4-bit format (`hipskinny.formats.bnb`: quantize, dequantize, QuantState,
checkpoints) and `matmul_4bit`, the op on it (`hipskinny.ops.matmul_4bit`)."""

from __future__ import annotations

from typing import Any

from .formats.bnb import *  # noqa: F403  (the format's public names)
from .formats.bnb import __all__ as _FORMAT

__all__ = [*_FORMAT, "matmul_4bit"]  # noqa: F405  (the op: `__getattr__`)


def __getattr__(attr: str) -> Any:      # the op on first use: importing the format loads no kernel code
    if attr == "matmul_4bit":
        from .ops.matmul_4bit import matmul_4bit

        globals()[attr] = matmul_4bit
        return matmul_4bit
    raise AttributeError(f"module 'hipskinny.bnb' has no attribute {attr!r}")
