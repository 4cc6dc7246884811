"""``hipskinny.moe``: mixture-of-experts decode, from router logits to the layer's output with hipskinny alone.

* `topk_softmax` -- router logits ``[N, E]`` to ``topk_weights`` fp32 ``[N, k]`` and ``topk_ids``
  int32 ``[N, k]`` (`hipskinny.topk_softmax`, `hipskinny.ops.topk_softmax`).
* `fused_moe` -- the experts' SwiGLU MLPs on the routed tokens, weighted and summed per token
  (`hipskinny.fused_moe`, `hipskinny.ops.fused_moe`).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["fused_moe", "topk_softmax"]  # noqa: F822  (the ops: `__getattr__`)


def __getattr__(attr: str) -> Any:      # the ops on first use
    if attr in __all__:
        value = getattr(importlib.import_module(f"{__package__}.ops.{attr}"), attr)
        globals()[attr] = value
        return value
    raise AttributeError(f"module 'hipskinny.moe' has no attribute {attr!r}")
