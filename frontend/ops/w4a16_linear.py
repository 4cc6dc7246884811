"""AWQ / GPTQ int4 linear for decode (w4a16): ``y = x @ W.T + bias`` with W a `hipskinny.w4a16.Prepared`.

The weight is the prepared layout of `hipskinny.w4a16` (``qweight`` uint32 ``[M, K/8]``
ExLlama-shuffled along K, ``scales`` ``[M, K/G]`` in x's dtype, ``zeros`` uint8 ``[M, K/G]`` or
none when symmetric, an act-order ``perm`` of K or none). x is fp16 or bf16 ``[..., K]``; y has
x's dtype. Sums are fp32 on every arch, bias added in fp32, one rounding at the end.

N = 1..8 (but see below), ``w4a16_linear_<f16|bf16>_n<N>_y<YTILE>`` (kernels/w4a16_linear.hip): the lane-split design
of `hipskinny.skinny_gemm` with 32-column (16-byte) chunks and its configuration rules (those of
`hipskinny.matmul_4bit`'s small-N kernel). Weights become 16-bit by the magic-number trick (fp16:
exact ``q - z`` pairs from the 0x6400 exponent; bf16: ``128 + q`` pairs from 0x4300, the
``(128 + z) * sum x`` correction subtracted per chunk in fp32), dot2 into fp32 per 32-column
chunk, scaled by the group's scale: the weights are never rounded. An act-order ``perm`` is
applied while x is staged in LDS. It needs K a multiple of 32 and a group size that is a power
of two (>= 32).

N = 9..64, kernel ``w4a16_linear_splitk_<f16|bf16>_t<NT>`` (kernels/w4a16_linear_splitk.hip): the matrix units,
with `skinny_gemm`'s split-K rules (token tiles, shards from the arch's flagship CU count,
persistent grid, shard partials and self-cleaning counters from the scratch pool, summed in shard
order). Each weight is widened in registers to x's dtype as ``T(s * (q - z))``, the exact product
rounded once (fp16: exact ``q - z`` pairs by the magic-number trick, one packed fp16 multiply;
bf16: fp32 ``(q - z) * s``, then RNE). The skeleton is `hipskinny.matmul_4bit`'s split-K kernel's
(kernels/include/hipskinny/splitk4.h), with the act-order gather while x is staged. It needs K a
multiple of 32 and a group size that is a power of two, or per-channel scales (any such K). It
also takes N = 2..8 on gfx942/gfx950 when N x M x K is large (`_linear.small_n_splitk`).

The route: N = 65..128, and every N where no fused kernel applies (K not a multiple of 32;
per-channel scales of a K that is not a power of two at N <= 8): the ``w4a16_linear_dequantize_<f16|bf16>``
kernel writes W as x's 16-bit dtype, ``T(s * (q - z))`` (the same values as the split-K kernel's:
what `hipskinny.w4a16.dequantize_checkpoint` gives, rounded to T), into a pooled ``[M, K]`` buffer
(scratch slot ``w4a16_linear.weights``), then `hipskinny.skinny_gemm`'s kernel for N (split-K on the
matrix units above 8 tokens) multiplies it: one bound call, two launches, nothing allocated per
call; host and GPU operands alike. Act-order: the dequantize kernel writes prepared column ``j``
to column ``perm[j]``, so W is in the checkpoint's column order and skinny_gemm multiplies plain
x. The route takes any group size that is a multiple of 8 dividing K (32, 64, 128, or per-channel
with K any multiple of 8: the only limits `prepare` leaves). Weights rounded once to T, fp32 sums,
one output rounding: skinny_gemm's accumulation on 16-bit weights. N > 128: torch tensors on a
ROCm GPU dequantize the same way into a tensor and take ``torch.nn.functional.linear``; anything
else is an error. ``fused=False`` forces the route, ``fused=True`` refuses shapes no fused kernel
takes.

Crossover (``fused=None``): the fused kernels for N = 1..64 on every arch, the route above (and
where no fused kernel applies). From the report's rows at N = 16 and 64 (`w4a16_linear` against
its variant `w4a16_linear:dequantize`, all 9 shapes x 5 archs, f16): the route moves 2.4-6.1x the
fused split-K kernel's bytes at N = 16 and 1.9-3.6x at N = 64 (large layers: medians 5.4-6.0x and
2.8-3.5x), and both are memory- or latency-bound there (except the fused kernel on gfx1100 at N =
64 on three shapes, matrix-bound): it writes and reads back the 16-bit weights (4.5 bytes per weight
against 0.5).

The act-order ``perm`` indexes x (fused kernels) and W's columns (the route), so it must be a
permutation of 0..K-1: a host perm is checked on every call before anything is launched
(InputValueError naming the first entry outside [0, K) or a repeated value). A perm on the GPU
cannot be checked without a sync, so the kernels clamp each entry to K - 1 (one unsigned min per
index: negative entries too): such a perm gives wrong results (the fused kernels read x's column
K - 1 for it; the route's are unspecified), never an access outside x or the weights.

Both paths are bitwise reproducible across calls, schedules and CU counts. GPU tensors need unit
strides along K, 16-byte aligned x and qweight, x rows a multiple of 16 bytes apart, and the
prepared arrays contiguous on x's device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd, operands
from ..devices.base import Device
from ..errors import InputTypeError, InputValueError
from ..formats import w4a16
from ..launch import Launch, make_launch
from ..operands import Operands
from ..torch_ops import declare, fake_operands
from . import Exports
from . import _linear as lin
from . import _skinny as sk
from ._common import DTYPE_TAG
from ._quantized import CHUNK, FUSED_MAX_N, MAX_N, QuantizedLinear, check_prepared

FAMILY = "w4a16_linear"
ROUTE_SLOT = "w4a16_linear.weights"        # the route's dequantized 16-bit weights [M, K]
NAMES = ("x", "w", "scales", "zeros", "perm", "bias", "out")
_OP = QuantizedLinear(FAMILY, NAMES, NAMES[1:5], "the prepared ",
                      "x and the prepared qweight must start at 16-byte aligned addresses", sums=True)
_calls = operands.CallCache()


def w4a16_linear(x: Any, prepared: w4a16.Prepared, bias: Any = None, *, out: Any = None,
                 fused: bool | None = None) -> Any:
    """``x @ W.T + bias`` with W a prepared AWQ/GPTQ int4 weight (`hipskinny.w4a16.prepare`; see the
    module docstring). x ``[..., K]`` fp16/bf16; the prepared scales in x's dtype (``prepare(...,
    dtype=...)``); bias ``[M]``, ``[1, M]`` or ``[N, M]`` in x's dtype. numpy, torch or DLPack
    operands (the prepared arrays too), all on the host or all on one GPU. ``fused``: None
    (default) picks by the crossover rule; False takes the dequantize route; True raises an
    error where the fused kernel does not apply. Differentiable w.r.t. x and bias on torch tensors
    (`hipskinny.autograd`; the prepared weight frozen; ``fused`` then ignored)."""
    p = prepared
    if not isinstance(p, w4a16.Prepared):
        raise InputTypeError(f"w4a16_linear: prepared must be a hipskinny.w4a16.Prepared (from w4a16.prepare); "
                             f"got {type(p).__name__}")
    if x.__class__ is not np.ndarray and autograd.wanted(x, p.qweight, p.scales, bias):
        return autograd.through("w4a16_linear", out, x, p.qweight, p.scales, int(p.group_size), bias, p.zeros, p.perm)
    objs = (x, p.qweight, p.scales, p.zeros, p.perm, bias, out)
    options = (p.shape, p.group_size, p.symmetric, p.experts, fused)
    key, addresses = operands.signature(NAMES, objs, options)
    call = _calls.get(key)
    if call is None:
        call = _calls.add(key, _bind(operands.gather("w4a16_linear", NAMES, objs), p, fused))
    return call(objs, addresses)


def fusible(n: int, k: int, group_size: int) -> bool:
    """Whether the fused kernels take N tokens at this K and group size (the crossover rule)."""
    g = group_size
    if k % CHUNK or g % CHUNK:
        return False
    if n <= MAX_N:
        return n >= 1 and g & (g - 1) == 0
    return n <= FUSED_MAX_N and (g & (g - 1) == 0 or g == k)


def _bind(ops: Operands, p: w4a16.Prepared, fused: bool | None) -> Any:
    xv = ops["x"]
    assert xv is not None
    n, m, k, g = _check(ops, p)
    device, tag = ops.device, DTYPE_TAG[xv.dtype]
    # g(k) = k >> log2_g; split-K with per-channel scales of a K that is no power of two: 31 (one group).
    log2_g = g.bit_length() - 1
    return _OP.bind(
        ops, n, m, k, fusible=fusible(n, k, g), fused=fused,
        fused_rule=f"K a multiple of {CHUNK} and a group size that is a power of two >= {CHUNK} (N > {MAX_N}: "
                   f"or per-channel); got N={n}, K={k}, group size {g}",
        route=lambda: _route(ops, n, m, k, g),
        launch=lambda x_stride, b_stride: _OP.launch(
            device, tag, n, m, k, x_stride, b_stride, {"log2_g": log2_g},
            {"log2_g": log2_g if g & (g - 1) == 0 else 31, "row_groups": k // g}),
        staged=lambda: _staged(ops, n, m, k))


def _staged(ops: Operands, n: int, m: int, k: int) -> list:
    """Host inputs: x as ``[N, K]`` rows, the prepared arrays flat; a host perm's check, made on every
    call before anything is launched (its contents may change between calls of one signature; a GPU
    perm is not checked: the kernels clamp it)."""
    return _OP.staged(ops, n, m, k, k, {"perm": lambda h: w4a16.check_perm(
        h, k, f"w4a16_linear: the prepared perm must be a permutation of 0..K-1 (K={k})")})


def _route(ops: Operands, n: int, m: int, k: int, g: int) -> Any:
    """The dequantize kernel writes W as x's 16-bit dtype in the checkpoint's column order
    (act-order undone by scattering each prepared column to ``perm[j]``) into the pooled slot
    `ROUTE_SLOT` for `hipskinny.skinny_gemm`'s kernel (`_skinny.dequantize_route`)."""
    xv = ops["x"]
    assert xv is not None
    device, tag = ops.device, DTYPE_TAG[xv.dtype]
    return sk.dequantize_route(
        ops, "w4a16_linear", NAMES, n, m, k, k,
        lambda pointers, out: _dequantize_launch(device, tag, m, k, g, pointers, out),
        lambda: _staged(ops, n, m, k), slot=ROUTE_SLOT, out_slot="w4a16_linear.y",
        k_rule="a multiple of 8 (the packed words)", align_message=_OP.align_message)


def _dequantize_launch(device: Device, tag: str, m: int, k: int, g: int, pointers: tuple[str, ...],
                       out: str = sk.DEQUANTIZED) -> Launch:
    """The dequantize kernel reading the prepared arrays and writing ``[M, K]`` 16-bit weights to the
    pointer named ``out`` (``pointers``: the call's)."""
    plan = _OP.dequantize_plan(device, f"{FAMILY}_dequantize_{tag}", m, m * k // 8)
    return make_launch(device, plan, pointers, w="w", scales="scales", zeros="zeros", perm="perm", out=out,
                           M=m, K=k, G=g)


def _check(ops: Operands, p: w4a16.Prepared) -> tuple[int, int, int, int]:
    """Shapes and dtypes of x and the prepared weight; returns N, M, K, the group size."""
    xv = ops["x"]
    assert xv is not None
    if xv.dtype not in DTYPE_TAG:
        raise InputTypeError(f"w4a16_linear: x has dtype {xv.dtype}; supported: float16, bfloat16")
    if p.experts is not None:
        raise InputValueError(f"w4a16_linear: the prepared weight is a stack of {p.experts} experts; a dense "
                              "layer is one [M, K] weight")
    m, k = (int(d) for d in p.shape)
    g = int(p.group_size)
    n = lin.tokens("w4a16_linear", xv, m, k)
    if k % 8 or g % 8 or k % g:
        raise InputValueError(f"w4a16_linear: K must be a multiple of 8 and of the group size, itself a multiple "
                              f"of 8 (as w4a16.prepare makes them); got K={k}, group size {g}")
    check_prepared("w4a16_linear", "the prepared ", ops, "w", (), m, k, g, p.symmetric, xv.dtype)
    lin.check_bias("w4a16_linear", ops["bias"], n, m, xv.dtype)
    return n, m, k, g


def plan_info(device: Device, x_dtype: Any, n: int, m: int, k: int) -> dict[str, Any]:
    """The configuration a fused call of this shape gets on ``device`` (tests and benchmarks)."""
    return _OP.plan_info(device, x_dtype, n, m, k)


def prepared_on(prepared: w4a16.Prepared, device: Any) -> w4a16.Prepared:
    """``prepared``'s arrays as torch tensors on ``device`` (a torch device; bfloat16 scales through their
    int16 view, as numpy has no bfloat16 torch understands), for the integrations that load weights."""
    import torch

    bf16 = prepared.scales.dtype.name == "bfloat16"

    def place(a: Any) -> Any:
        if bf16 and a is prepared.scales:
            return torch.from_numpy(a.view("int16")).to(device).view(torch.bfloat16)
        return torch.from_numpy(a).to(device)

    return prepared.map(place)


def prepared_bytes(prepared: w4a16.Prepared) -> int:
    """Bytes the prepared arrays hold (numpy arrays or torch tensors)."""
    return sum(a.nbytes if hasattr(a, "nbytes") else a.numel() * a.element_size()
               for a in (prepared.qweight, prepared.scales, prepared.zeros, prepared.perm) if a is not None)


def _torch_prepared(qweight: Any, scales: Any, group_size: int, zeros: Any, perm: Any,
                    shape: tuple[int, int]) -> w4a16.Prepared:
    return w4a16.Prepared(qweight, scales, zeros, perm, int(group_size), shape, zeros is None, "prepared", None)


def _torch_w4a16_linear(x: Any, qweight: Any, scales: Any, group_size: int, bias: Any = None, zeros: Any = None,
                        perm: Any = None, *, out: Any = None) -> Any:
    """The torch op's form: the prepared arrays as arguments (M and K from qweight ``[M, K/8]``; symmetric
    when zeros is None)."""
    shape = (int(qweight.shape[0]), 8 * int(qweight.shape[1]))
    return w4a16_linear(x, _torch_prepared(qweight, scales, group_size, zeros, perm, shape), bias, out=out)


def _torch_check(x: Any, qweight: Any, scales: Any, group_size: int, bias: Any = None, zeros: Any = None,
                 perm: Any = None, *, out: Any = None) -> None:
    """The op's bind-time rules on fake tensors (`hipskinny.torch_ops.validate`)."""
    ops = fake_operands("w4a16_linear", NAMES, (x, qweight, scales, zeros, perm, bias, out))
    wv = ops["w"]
    assert wv is not None
    shape = (wv.shape[0], 8 * wv.shape[1]) if len(wv.shape) == 2 else (0, 0)
    _bind(ops, _torch_prepared(qweight, scales, group_size, zeros, perm, shape), None)


# torch.ops.hipskinny.w4a16_linear / w4a16_linear_out (registered by hipskinny.torch_ops).
TORCH_OPS = declare("w4a16_linear", "Tensor x, Tensor qweight, Tensor scales, int group_size, Tensor? bias=None, "
                    "Tensor? zeros=None, Tensor? perm=None", _torch_w4a16_linear,
                    lambda x, qweight, *_: (*x[:-1], qweight[0]), check=_torch_check,
                    autograd=autograd.linear(
                        "w4a16_linear", 4, lambda a: {"qweight": a[1], "scales": a[2], "zeros": a[5], "perm": a[6]},
                        lambda n, ints, dt: autograd.unprepared(n["qweight"], n["scales"], n["zeros"], n["perm"],
                                                                ints[0], None)))
EXPORTS = Exports(TORCH_OPS, ("w4a16_linear", "w4a16_linear_splitk"))


def w4a16_linear_reference(x: Any, qweight: Any, scales: Any, qzeros: Any = None, g_idx: Any = None, *, fmt: str,
                           group_size: int, bias: Any = None) -> np.ndarray:
    """The exact semantics in float64 from the checkpoint tensors (not the prepared layout):
    ``x @ w4a16.dequantize_checkpoint(...).T + bias`` before any rounding (shape ``[..., M]``)."""
    return lin.linear_reference(x, w4a16.dequantize_checkpoint(qweight, scales, qzeros, g_idx, fmt=fmt,
                                                            group_size=group_size), bias)
