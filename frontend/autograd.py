"""Gradients of hipskinny's linear-like torch ops with respect to their activations and bias.

Registered with ``torch.library.register_autograd`` on the functional ops (`hipskinny.torch_ops`);
the Python entries (``hipskinny.gemv`` ...) called on torch tensors go through those ops when
torch's grad mode is on and an operand requires grad (`wanted`), so both spellings differentiate.

* ``grad_x = grad_y @ W``: W as a 16-bit matrix of x's dtype -- the weight itself (gemv,
  skinny_gemm), or dequantized: bnb 4-bit by `hipskinny.ops.matmul_4bit.dequantize` (the
  dequantize kernel; K not a multiple of 8: `hipskinny.bnb.dequantize_4bit` on the host), fp8 by
  `hipskinny.fp8.dequantize` and w4a16 by `hipskinny.w4a16.unprepare` (both on the host, exact in
  fp32, then rounded to x's dtype) -- multiplied by ``torch.matmul`` in x's dtype (fp32
  accumulation on ROCm and on the CPU, one rounding). A quantized weight is thus rounded once to
  x's dtype (as the split-K kernels and the routes do in the forward pass); the tests bound the
  error by ``(eps + M * 2**-24) * sum |terms|``. The dequantizing half runs as the custom op
  ``torch.ops.hipskinny.linear_grad_x`` (fused_moe's backward as ``moe_grad``), so torch.compile
  traces backward graphs without entering kernels or host code.
* ``grad_bias``: grad_y summed over the tokens in fp32 (a per-token bias: grad_y itself), rounded
  to the bias's dtype.
* fused_moe: ``grad_x`` (and ``grad_topk_weights``) in fp32 from the experts' weights in fp32
  (int4 stacks unprepared, exactly), the gate/up sums recomputed in fp32 without the forward's
  intermediate roundings (their derivative taken as 1), one rounding to x's dtype at the end.

Weights are frozen: a weight, scale or state tensor that requires grad is an `InputValueError`
(never a silent missing gradient).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import InputValueError


def wanted(*operands: Any) -> bool:
    """Whether a Python entry's call must go through its torch op for autograd: torch is imported,
    its grad mode is on and an operand (torch tensor) requires grad. Entries ask only for operands
    that are not numpy arrays; under ``torch.no_grad()`` / ``inference_mode`` this is one C call."""
    grad_enabled = _grad_enabled or _find_torch()
    if grad_enabled is None or not grad_enabled():
        return False
    for t in operands:
        if t is not None and getattr(t, "requires_grad", False):
            return True
    return False


_grad_enabled: Any = None        # torch._C.is_grad_enabled, once torch is imported


def _find_torch() -> Any:
    global _grad_enabled
    torch = sys.modules.get("torch")
    _grad_enabled = None if torch is None else torch._C.is_grad_enabled
    return _grad_enabled


def through(op: str, out: Any, *args: Any, **options: Any) -> Any:
    """A Python entry's call made as ``torch.ops.hipskinny.<op>`` (autograd records it)."""
    if out is not None:
        raise InputValueError(f"{op}: out= does not support autograd, but an operand requires grad; call it "
                              "without out= (or under torch.no_grad())")
    import torch

    from . import torch_ops

    torch_ops.register()
    return getattr(torch.ops.hipskinny, op)(*args, **options)


def frozen(op: str, named: dict[str, Any]) -> None:
    """`InputValueError` naming the first weight-side tensor that requires grad."""
    for name, t in named.items():
        if getattr(t, "requires_grad", False):
            raise InputValueError(f"{op}: {name} requires grad, but hipskinny's weights are frozen: it computes "
                                  f"gradients for x and bias only. Pass {name}.detach() (or set "
                                  f"requires_grad_(False)); to train this weight, use a 16-bit torch layer "
                                  "(e.g. torch.nn.functional.linear) for it")


def _bias_grad(grad_y: Any, bias: Any) -> Any:
    m = grad_y.shape[-1]
    g = grad_y.reshape(-1, m).float()
    if tuple(bias.shape) == tuple(g.shape) and g.shape[0] != 1:
        return g.to(bias.dtype).reshape(bias.shape)
    return g.sum(0).to(bias.dtype).reshape(bias.shape)


def _x_grad(grad_y: Any, w16: Any) -> Any:
    """``grad_y @ W`` for y = x @ W.T; shapes [..., M] @ [M, K] -> [..., K] in x's dtype."""
    return grad_y.matmul(w16.to(grad_y.dtype))


def linear(op: str, bias_at: int, weights: Callable[[tuple[Any, ...]], dict[str, Any]],
           dense: Callable[[dict[str, Any], list[int], Any], Any], *, opaque: bool = True
           ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(setup_context, backward)`` of a linear-like op ``y = x @ W.T + bias`` whose x is its first
    argument and bias its positional argument ``bias_at``. ``weights(inputs)``: the weight-side
    tensors by name (checked frozen, saved for backward); ``dense(weights, ints, x_dtype)``: W
    ``[M, K]`` in x's dtype, ``ints`` the op's int arguments in order (int lists flattened).
    ``opaque``: ``dense`` runs hipskinny kernels or host code, so backward calls it through the
    custom op ``torch.ops.hipskinny.linear_grad_x`` (what torch.compile traces); else (plain torch)
    directly."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: Any = None) -> None:
        named = weights(inputs)
        frozen(op, named)
        bias = inputs[bias_at]
        ctx.save_for_backward(*named.values())
        ctx.names = list(named)
        ctx.ints = [int(v) for a in inputs if not hasattr(a, "requires_grad") and a is not None
                    for v in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(v, int)]
        ctx.inputs, ctx.k = len(inputs), inputs[0].shape[-1]
        ctx.bias_meta = None if bias is None else _Meta(tuple(bias.shape), bias.dtype)

    def backward(ctx: Any, grad_y: Any) -> tuple[Any, ...]:
        grads: list[Any] = [None] * ctx.inputs
        if ctx.needs_input_grad[0]:
            if opaque:
                import torch

                grads[0] = torch.ops.hipskinny.linear_grad_x(grad_y, list(ctx.saved_tensors), ctx.names, op, ctx.k,
                                                             ctx.ints)
            else:
                grads[0] = _grad_x(grad_y, list(ctx.saved_tensors), ctx.names, op, ctx.k, ctx.ints)
        if ctx.bias_meta is not None and ctx.needs_input_grad[bias_at]:
            grads[bias_at] = _bias_grad(grad_y, ctx.bias_meta)
        return tuple(grads)

    _DENSE[op] = dense
    return setup_context, backward


_DENSE: dict[str, Callable[..., Any]] = {}       # by op name: the ops' dense weights for backward


def _grad_x(grad_y: Any, weights: list[Any], names: list[str], op: str, k: int, ints: list[int]) -> Any:
    """``grad_y @ W`` of op ``op`` (its ``dense`` from `linear`; ``k``: x's last dim, for fake tensors)."""
    return _x_grad(grad_y, _DENSE[op](dict(zip(names, weights, strict=True)), list(ints), grad_y.dtype))


def _grad_x_shape(grad_y: Any, weights: Any, names: Any, op: str, k: int, ints: Any) -> tuple[Any, ...]:
    return (*grad_y[:-1], k)


def _torch_ops() -> list[Any]:
    from .torch_ops import TorchOp

    return [TorchOp("linear_grad_x(Tensor grad_y, Tensor?[] weights, str[] names, str op, int k, int[] ints) "
                    "-> Tensor", _grad_x, _grad_x_shape),
            TorchOp("moe_grad(Tensor grad_y, Tensor x, Tensor w13, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
                    "Tensor?[] prepared, int[] group_sizes) -> (Tensor, Tensor)", _moe_grad,
                    lambda grad_y, x, w13, w2, tw, *_: (x, tw), _moe_grad_dtypes, results=2)]


class _Meta:
    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype


# ----------------------------------------------------------------------------------------------
# fused_moe


PREPARED = tuple(f"{w}_{p}" for w in ("w13", "w2") for p in ("scales", "zeros", "perm"))


def moe(op: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(setup_context, backward)`` of ``fused_moe(x, w13, w2, topk_weights, topk_ids, *, ...)``:
    gradients for x and topk_weights (module docstring)."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: Any = None) -> None:
        kw = keyword_only_inputs or {}
        x, w13, w2, tw, ids, *prepared = inputs
        frozen(op, {"w13": w13, "w2": w2, **dict(zip(PREPARED, prepared, strict=True))})
        ctx.save_for_backward(x, w13, w2, tw, ids, *prepared)
        ctx.groups = (kw.get("w13_group_size", 0), kw.get("w2_group_size", 0))
        ctx.inputs = len(inputs)

    def backward(ctx: Any, grad_y: Any) -> tuple[Any, ...]:
        import torch

        x, w13, w2, tw, ids, *prepared = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[3]
        gx, gw = torch.ops.hipskinny.moe_grad(grad_y, x, w13, w2, tw, ids, prepared, list(ctx.groups))
        rest = (None,) * (ctx.inputs - 4)
        return (gx if need_x else None, None, None, gw if need_w else None, *rest)

    return setup_context, backward


def _moe_grad(grad_y: Any, x: Any, w13: Any, w2: Any, tw: Any, ids: Any, prepared: list[Any], groups: list[int]
              ) -> tuple[Any, Any]:
    """fused_moe's ``(grad_x, grad_topk_weights)`` (module docstring); the custom op
    ``torch.ops.hipskinny.moe_grad`` (data-dependent routing and host code: opaque to torch.compile)."""
    import torch

    s13, z13, p13, s2, z2, p2 = prepared
    dense13 = _expert_weights(w13, s13, z13, p13, groups[0])
    dense2 = _expert_weights(w2, s2, z2, p2, groups[1])
    e_count, rows, _ = dense13(None)
    i = rows // 2
    xf, gy = x.float(), grad_y.float()
    gx = torch.zeros_like(xf)
    gw = torch.zeros(tw.shape, dtype=torch.float32, device=tw.device)
    ids64 = ids.long()
    for e in torch.unique(ids64).tolist():
        if not 0 <= e < e_count:
            continue                                      # skipped slots contribute nothing
        t, j = (ids64 == e).nonzero(as_tuple=True)
        a13, a2 = dense13(e), dense2(e)                   # [2I, H], [H, I] fp32
        gu = xf[t] @ a13.T
        g, u = gu[:, :i], gu[:, i:]
        sig = torch.sigmoid(g)
        silu = g * sig
        gw[t, j] = (gy[t] * ((silu * u) @ a2.T)).sum(1)
        dact = (gy[t] * tw[t, j].float()[:, None]) @ a2
        dg = dact * u * (sig * (1 + g * (1 - sig)))
        gx.index_add_(0, t, torch.cat([dg, dact * silu], 1) @ a13)
    return gx.to(x.dtype), gw.to(tw.dtype)


def _moe_grad_dtypes(grad_y: Any, x: Any, w13: Any, w2: Any, tw: Any, *_: Any) -> tuple[Any, Any]:
    return x.dtype, tw.dtype


def _expert_weights(w: Any, scales: Any, zeros: Any, perm: Any, group_size: int) -> Callable[[int | None], Any]:
    """Expert ``e``'s weight in fp32 (``None``: the stack's (E, rows, K))."""
    if not group_size:
        return lambda e: tuple(w.shape) if e is None else w[e].float()
    e_count, rows, words = (int(d) for d in w.shape)
    cache: list[Any] = []

    def expert(e: int | None) -> Any:
        if e is None:
            return e_count, rows, 8 * words
        if not cache:
            cache.append(unprepared(w, scales, zeros, perm, group_size, e_count))
        return cache[0][e]

    return expert


def unprepared(qweight: Any, scales: Any, zeros: Any, perm: Any, group_size: int, experts: int | None) -> Any:
    """A w4a16 weight's torch tensors as W ``[.., M, K]`` fp32 on qweight's device (`hipskinny.w4a16.unprepare`,
    exact: on the host)."""
    import torch

    from .formats import w4a16

    def host(a: Any) -> Any:
        if a is None:
            return None
        a = a.detach().cpu()
        return a.view(torch.int16).numpy().view(_bf16()) if a.dtype == torch.bfloat16 else a.numpy()

    rows, words = (int(d) for d in qweight.shape[-2:])
    p = w4a16.Prepared(host(qweight), host(scales), host(zeros), host(perm), int(group_size), (rows, 8 * words),
                       zeros is None, "prepared", experts)
    return torch.from_numpy(w4a16.unprepare(p, np.float32)).to(qweight.device)


def _bf16() -> Any:
    import ml_dtypes

    return ml_dtypes.bfloat16
