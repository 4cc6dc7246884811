"""``hipskinny.mla``: sparse MLA decode's FP8 KV caches (`hipskinny.formats.mla`: layouts, pack, dequantize)
and `sparse_decode`, the attention op on them (`hipskinny.ops.sparse_mla`)."""

from __future__ import annotations

from typing import Any

from .formats.mla import *  # noqa: F403  (the format's public names)
from .formats.mla import __all__ as _FORMAT

__all__ = [*_FORMAT, "sparse_decode"]  # noqa: F405  (the op: `__getattr__`)


def __getattr__(attr: str) -> Any:      # the op on first use: importing the format loads no kernel code
    if attr == "sparse_decode":
        from .ops.sparse_mla import sparse_decode

        globals()[attr] = sparse_decode
        return sparse_decode
    raise AttributeError(f"module 'hipskinny.mla' has no attribute {attr!r}")
