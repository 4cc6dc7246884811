"""``hipskinny.mla``: sparse MLA decode's FP8 KV caches (`hipskinny.formats.mla`: layouts, pack, dequantize)
and the attention op on them, `hipskinny.sparse_mla` (also here, under its first name `sparse_decode`)."""

from __future__ import annotations

from typing import Any

from .formats.mla import *  # noqa: F403  (the format's public names)
from .formats.mla import __all__ as _FORMAT

__all__ = [*_FORMAT, "sparse_mla", "sparse_decode"]  # noqa: F405  (the op: `__getattr__`)


def __getattr__(attr: str) -> Any:      # the op on first use: importing the format loads no kernel code
    if attr in ("sparse_mla", "sparse_decode"):
        from .ops.sparse_mla import sparse_mla

        globals()[attr] = sparse_mla
        return sparse_mla
    raise AttributeError(f"module 'hipskinny.mla' has no attribute {attr!r}")
