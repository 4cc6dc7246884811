"""Mixture-of-experts decode: from router logits to the layer's output with hipskinny alone.

* `topk_softmax` -- router logits ``[N, E]`` to ``topk_weights`` fp32 ``[N, k]`` and ``topk_ids``
  int32 ``[N, k]`` (see `hipskinny.ops.topk_softmax`).
* `fused_moe` -- the experts' SwiGLU MLPs on the routed tokens, weighted and summed per token (see
  `hipskinny.ops.fused_moe`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["fused_moe", "topk_softmax"]


def topk_softmax(router_logits: Any, k: int, renormalize: bool = False, **options: Any) -> Any:
    """Softmax over the experts in fp32, then the ``k`` largest (ties: the lower expert id first):
    ``(topk_weights, topk_ids)``; see `hipskinny.ops.topk_softmax`."""
    from .ops.topk_softmax import topk_softmax as _op

    return _op(router_logits, k, renormalize, **options)


def fused_moe(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any, **options: Any) -> Any:
    """``out[t] = sum_j topk_weights[t, j] * w2[e] @ (silu(w13[e][:I] @ x[t]) * (w13[e][I:] @ x[t]))`` with
    ``e = topk_ids[t, j]``; see `hipskinny.ops.fused_moe`."""
    from .ops.fused_moe import fused_moe as _op

    return _op(x, w13, w2, topk_weights, topk_ids, **options)
