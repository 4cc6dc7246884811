"""Fused mixture-of-experts decode (SwiGLU experts): `hipskinny.fused_moe` (also `hipskinny.moe.fused_moe`).

``out[t] = sum_j topk_weights[t, j] * (w2[e] @ act(t, e))``, ``e = topk_ids[t, j]``, with
``act(t, e) = silu(w13[e][:I] @ x[t]) * (w13[e][I:] @ x[t])`` in vLLM's rounding order: the gate
and up sums rounded to x's dtype T, silu in fp32 (``g / (1 + exp(-g))``) rounded to T, the product
of the two T values rounded once (bit for bit what vLLM's ``silu_and_mul`` does to T inputs).
Every sum is fp32; ``topk_weights`` (fp32) scale each expert's fp32 result, the top-k results are
added in fp32 in slot order and rounded once to T. Bitwise reproducible across calls,
schedules and CU counts.

Weights: ``w13`` ``[E, 2I, H]`` (gate rows, then up rows) and ``w2`` ``[E, H, I]``, each either an
int4 expert stack prepared by `hipskinny.w4a16.prepare` (AWQ, GPTQ v1/v2, symmetric or not,
act-order; group size a power of two >= 32) or a plain array of x's dtype. x ``[N, H]`` fp16 or
bf16; ``topk_ids`` int32 ``[N, k]``, ``topk_weights`` float32 ``[N, k]`` (as
`hipskinny.moe.topk_softmax` returns them); ``N * k <= 1024``, ``k <= 16``, ``E <= 512``, H and I
multiples of 32. An id outside ``[0, E)`` is skipped (its slot contributes nothing) and counted:
`invalid_slots` reads the count of the last call on a device and stream (that read synchronizes);
this holds for ids on the GPU too (vLLM's expert-parallel masking passes -1). An int4 stack's
act-order ``perm`` rows must be permutations of 0..K-1: host perms are checked on every call
(InputValueError); a perm on the GPU is not (no sync), but an entry outside ``[0, K)`` reads column
K - 1: wrong results, never an access outside a buffer.

Three launches (kernels/fused_moe.hip: the route sorts the slots by expert on the device, GEMM1
computes act for every routed slot, GEMM2 the weighted down projection and the per-token sums), no host
sync, nothing allocated per call (pooled scratch, self-cleaning counters). Unrouted experts are not read.
NP, the token rows a unit carries, comes from host shapes only (`token_group`): graph replays match.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .. import autograd, dtypes, operands, registry
from ..devices.base import Device
from ..errors import InputTypeError, InputValueError
from ..formats import w4a16
from ..launch import LaunchPlan, PlanCache, make_launch, make_plan, threads
from ..operands import DeviceCall, HostCall, Operands
from ..torch_ops import declare, fake_operands
from . import Exports
from ._common import DTYPE_TAG, MAX_EXPERTS, MAX_TOPK
from ._quantized import check_prepared

FAMILY = "fused_moe"
NAMES = ("x", "w13", "w13_scales", "w13_zeros", "w13_perm", "w2", "w2_scales", "w2_zeros", "w2_perm",
         "topk_weights", "topk_ids", "out")
MAX_SLOTS = 1024          # N * k (the route kernel's LDS)
COUNTERS = 1024           # GEMM2 row blocks at most (the counter words before the route)
META_WORDS = 4
GROUPS = (1, 2, 4)        # token rows per unit (NP; kernels/fused_moe.hip builds no NP = 8)
GEMM1_PAIRS = {1: 2, 2: 2, 4: 2}   # gate/up row pairs per wave tile, by NP (kernels/fused_moe.hip)
GEMM2_ROWS = {1: 4, 2: 4, 4: 2}    # rows per row group of a wave tile, by NP
GROUPS_PER_CU = 1         # as upstream's kernels: each stages its unit's x once per item; fewer stage less
ACTIVATIONS = ("silu",)
META_SLOT = "fused_moe.scratch"   # counters, route (int32), act (T [P, I]), results (fp32 [P, H]): scratch_bytes
_plans = PlanCache()
_calls = operands.CallCache()


def fused_moe(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any, *, activation: str = "silu",
              out: Any = None) -> Any:
    """The routed experts' SwiGLU MLPs, weighted and summed per token (module docstring). Returns
    ``[N, H]`` in x's dtype and container kind, or writes ``out`` (contiguous) and returns it.
    Differentiable w.r.t. x and topk_weights on torch tensors (`hipskinny.autograd`; experts frozen)."""
    if activation not in ACTIVATIONS:
        raise InputValueError(f"fused_moe: activation {activation!r}; supported: {', '.join(ACTIVATIONS)}")
    p13, p2 = _parts(w13, "w13"), _parts(w2, "w2")
    if x.__class__ is not np.ndarray and autograd.wanted(x, topk_weights, p13[0][0], p2[0][0], p13[0][1], p2[0][1]):
        return autograd.through("fused_moe", out, x, p13[0][0], p2[0][0], topk_weights, topk_ids, *p13[0][1:],
                                *p2[0][1:], w13_group_size=0 if p13[1] is None else int(p13[1][2]),
                                w2_group_size=0 if p2[1] is None else int(p2[1][2]), activation=activation)
    objs = (x, *p13[0], *p2[0], topk_weights, topk_ids, out)
    key, addresses = operands.signature(NAMES, objs, (p13[1], p2[1], activation))
    call = _calls.get(key)
    if call is None:
        call = _calls.add(key, _bind(operands.gather("fused_moe", NAMES, objs), p13[1], p2[1]))
    return call(objs, addresses)


def _parts(w: Any, name: str) -> tuple[tuple[Any, Any, Any, Any], tuple | None]:
    """A weight's four operands (array or qweight, scales, zeros, perm) and its prepared options."""
    if isinstance(w, w4a16.Prepared):
        return (w.qweight, w.scales, w.zeros, w.perm), (w.experts, w.shape, w.group_size, w.symmetric)
    if w is None:
        raise InputTypeError(f"fused_moe: {name} is required (an [E, rows, K] array or a w4a16.Prepared stack)")
    return (w, None, None, None), None


def _bind(ops: Operands, p13: tuple | None, p2: tuple | None) -> Any:
    xv = ops["x"]
    assert xv is not None
    n, h, i, e, k, g13, g2 = _check(ops, p13, p2)
    operands.check_out(ops, (n, h), xv.dtype)
    if n == 0 or h == 0:
        return operands.nothing(ops, (n, h), xv.dtype, "fused_moe.y")
    device, slots = ops.device, n * k
    route, gemm1, gemm2 = _plan(device, DTYPE_TAG[xv.dtype], p13 is not None, p2 is not None, n, h, i, e, k)
    x_stride = h if ops.on_host else operands.staged_rows("fused_moe", xv, h)
    pointers = (*NAMES, META_SLOT)          # inputs, out, then the routing metadata's scratch slot
    launches = [
        make_launch(device, route, pointers, ids="topk_ids", meta=META_SLOT, P=slots, E=e,
                        group=route.info["group"]),
        make_launch(device, gemm1, pointers, x="x", w="w13", scales="w13_scales", zeros="w13_zeros",
                        perm="w13_perm", meta=META_SLOT, I=i, H=h, x_stride=x_stride, log2_g=g13, topk=k,
                        blocks=gemm1.info["blocks"], block_pairs=gemm1.info["block_rows"], P=slots),
        make_launch(device, gemm2, pointers, w="w2", scales="w2_scales", zeros="w2_zeros", perm="w2_perm",
                        meta=META_SLOT, weights="topk_weights", out="out", H=h, I=i, topk=k, N=n,
                        blocks=gemm2.info["blocks"], block_rows=gemm2.info["block_rows"], log2_g=g2, P=slots),
    ]
    scratch = ((META_SLOT, scratch_bytes(slots, h, i)),)
    if ops.on_host:
        perms = {f"{w}_perm": (lambda a, w=w, kdim=kdim: w4a16.check_perm(
            a, kdim, f"fused_moe: {w}'s prepared perm must be a permutation of 0..K-1 for every expert (K={kdim})",
            experts=True)) for w, kdim in (("w13", h), ("w2", i))}
        staged = [operands.flat(ops, name, f"fused_moe.{name}", perms.get(name)) for name in NAMES[:-1]]
        return HostCall(ops, launches, staged, out_shape=(n, h), out_dtype=xv.dtype, out_slot="fused_moe.y",
                        scratch_slots=scratch)
    operands.require_contiguous(ops, NAMES[1:-1])
    return DeviceCall(ops, launches, out_shape=(n, h), out_dtype=xv.dtype, aligned=("x", "w13"),
                      align_message="x and the expert weights must start at 16-byte aligned addresses",
                      scratch_slots=scratch)


def _check(ops: Operands, p13: tuple | None, p2: tuple | None) -> tuple[int, int, int, int, int, int, int]:
    """Shapes and dtypes; returns N, H, I, E, k and log2 of the two group sizes (0 for 16-bit)."""
    xv, wv, tv = ops["x"], ops["topk_weights"], ops["topk_ids"]
    assert xv is not None and wv is not None and tv is not None
    if xv.dtype not in DTYPE_TAG:
        raise InputTypeError(f"fused_moe: x has dtype {xv.dtype}; supported: float16, bfloat16")
    if len(xv.shape) != 2:
        raise InputValueError(f"fused_moe: x must be [N, H]; got shape {xv.shape}")
    n, h = (int(d) for d in xv.shape)
    e13, rows13, k13, g13 = _weight(ops, "w13", p13, xv.dtype)
    e2, rows2, k2, g2 = _weight(ops, "w2", p2, xv.dtype)
    if e13 != e2:
        raise InputValueError(f"fused_moe: w13 has {e13} experts and w2 {e2}; they must match")
    if rows13 % 2 or k13 != h:
        raise InputValueError(f"fused_moe: w13 must be [E, 2I, H] with H={h} (x's last dim); got [{e13}, {rows13}, "
                              f"{k13}]")
    i = rows13 // 2
    if rows2 != h or k2 != i:
        raise InputValueError(f"fused_moe: w2 must be [E, H, I] = [{e13}, {h}, {i}] (I from w13's 2I rows); got "
                              f"[{e2}, {rows2}, {k2}]")
    if not 1 <= e13 <= MAX_EXPERTS:
        raise InputValueError(f"fused_moe: {e13} experts; supported: 1..{MAX_EXPERTS}")
    if h % 32 or i % 32:
        raise InputValueError(f"fused_moe: H={h} and I={i} must be multiples of 32")
    if tv.dtype != np.dtype(np.int32):
        raise InputTypeError(f"fused_moe: topk_ids has dtype {tv.dtype}; it must be int32 [N, k]")
    if len(tv.shape) != 2 or tv.shape[0] != n:
        raise InputValueError(f"fused_moe: topk_ids must be [N, k] with N={n} (x's rows); got shape {tv.shape}")
    k = int(tv.shape[1])
    if wv.dtype != np.dtype(np.float32):
        raise InputTypeError(f"fused_moe: topk_weights has dtype {wv.dtype}; it must be float32 [N, k]")
    if wv.shape != tv.shape:
        raise InputValueError(f"fused_moe: topk_weights must have topk_ids' shape {tv.shape}; got {wv.shape}")
    if not 1 <= k <= MAX_TOPK or n * k > MAX_SLOTS:
        raise InputValueError(f"fused_moe: k={k} choices for N={n} tokens; supported: k = 1..{MAX_TOPK} and "
                              f"N * k <= {MAX_SLOTS}")
    return n, h, i, e13, k, g13, g2


def _weight(ops: Operands, name: str, prepared: tuple | None, dtype: np.dtype) -> tuple[int, int, int, int]:
    """A weight's E, rows, K and log2(group size) (0 for 16-bit weights)."""
    wv = ops[name]
    assert wv is not None
    if prepared is None:
        if wv.dtype != dtype:
            raise InputTypeError(f"fused_moe: {name} has dtype {wv.dtype}; 16-bit experts must have x's dtype "
                                 f"{dtype} (or pass a w4a16.Prepared stack)")
        if len(wv.shape) != 3:
            raise InputValueError(f"fused_moe: {name} must be [E, rows, K]; got shape {wv.shape}")
        e, rows, k = (int(d) for d in wv.shape)
        return e, rows, k, 0
    experts, (rows, k), g, symmetric = prepared
    if experts is None:
        raise InputValueError(f"fused_moe: {name} is a prepared dense weight; prepare the expert stack "
                              "([E, ...] tensors) instead")
    e = int(experts)
    if g < 32 or g & (g - 1) or k % g:
        raise InputValueError(f"fused_moe: {name} has group size {g} over K={k}; the kernels need a power of two "
                              ">= 32 dividing K (per-channel scales: K a power of two)")
    check_prepared("fused_moe", f"{name}'s prepared ", ops, name, (e,), rows, k, g, symmetric, dtype)
    return e, rows, k, g.bit_length() - 1


def expected_experts(n: int, k: int, e: int) -> float:
    """Distinct experts N tokens route to when each picks k different ones uniformly:
    E (1 - (1 - k/E)^N)."""
    return float(k) if n == 1 else e * -math.expm1(n * math.log1p(-min(k, e - 1e-9) / e))


def token_group(n: int, k: int, e: int) -> int:
    """NP: the smallest built group that, under uniform routing, leaves at most half an expert (in
    expectation) with more slots than NP (host-known shapes only). An expert's slots are
    Binomial(N, k/E); one with more than NP is read once per NP of them. A unit of one slot
    multiplies one row (kernels/fused_moe.hip `rows_used`), so a larger NP costs the many
    one-slot experts nothing; a unit of 2 .. NP - 1 slots multiplies NP rows. At most 4 (GROUPS)."""
    p = min(k, e) / e
    for g in GROUPS:
        over = 1.0 - sum(math.comb(n, c) * p**c * (1.0 - p) ** (n - c) for c in range(min(g, n) + 1))
        if e * over <= 0.5:
            return g
    return GROUPS[-1]


def _plan(device: Device, tag: str, w4_13: bool, w4_2: bool, n: int, h: int, i: int, e: int, k: int
          ) -> tuple[LaunchPlan, LaunchPlan, LaunchPlan]:
    key = (device, tag, w4_13, w4_2, n, h, i, e, k, device.properties.cu_count)
    return _plans.get(key, lambda: _build_plans(device, tag, w4_13, w4_2, n, h, i, e, k))  # type: ignore[return-value]


def _build_plans(device: Device, tag: str, w4_13: bool, w4_2: bool, n: int, h: int, i: int, e: int, k: int
                 ) -> tuple[LaunchPlan, LaunchPlan, LaunchPlan]:
    arch, module = device.arch, registry.load(device, FAMILY)
    slots = n * k
    bf16 = tag == "bf16"

    def lds(np_: int, kdim: int) -> int:
        return np_ * kdim * 2 + (np_ * kdim // 8 if bf16 else 0)

    np_ = token_group(n, k, e)
    while np_ > 1 and max(lds(np_, h), lds(np_, i)) > arch.lds_per_workgroup:
        np_ //= 2
    if lds(1, h) > arch.lds_per_workgroup:
        raise InputValueError(f"fused_moe: H={h} does not fit the {arch.name} LDS ({arch.lds_per_workgroup} bytes) "
                              "as one staged row")
    distinct = max(1, round(expected_experts(n, k, e)))
    grid = device.properties.cu_count * GROUPS_PER_CU

    def gemm(name: str, rows: int, per_wave: int, kdim: int, max_blocks: int) -> LaunchPlan:
        fn, meta = module.kernel(name)
        step = per_wave * (threads(meta) // arch.wave_size)
        blocks = max(1, min(-(-grid // distinct), -(-rows // step), max_blocks))
        block_rows = -(-rows // (blocks * step)) * step
        blocks = -(-rows // block_rows)
        size = lds(np_, kdim)
        return make_plan(fn, meta, (max(1, min(grid, slots * blocks)), 1, 1), shared_mem=size,
                         info={"kernel": name, "blocks": blocks, "block_rows": block_rows, "group": np_,
                               "lds_bytes": size})

    g1 = gemm(f"fused_moe_gemm1_{tag}_{'w4' if w4_13 else 'w16'}_n{np_}", i, GEMM1_PAIRS[np_], h, 1 << 30)
    # Two row groups per wave when I has at most wave / 2 chunks of 32 (I = 768 on wave64).
    s = 2 if i // 32 <= arch.wave_size // 2 else 1
    g2 = gemm(f"fused_moe_gemm2_{tag}_{'w4' if w4_2 else 'w16'}_n{np_}_s{s}", h, GEMM2_ROWS[np_] * s, i, COUNTERS)
    fn, meta = module.kernel("fused_moe_route")
    route = make_plan(fn, meta, (1, 1, 1), info={"kernel": "fused_moe_route", "group": np_})
    return route, g1, g2


def scratch_bytes(slots: int, h: int, i: int) -> int:
    """The scratch a call needs: counters and route words (rounded to 16 bytes), act (2 bytes per
    slot and column of I, rounded to 16 bytes) and the fp32 slot results [P, H]."""
    route = 4 * (COUNTERS + -(-(META_WORDS + 4 * slots) // 4) * 4)
    return route + 2 * -(-slots * i // 8) * 8 + 4 * slots * h


def plan_info(device: Device, x_dtype: Any, n: int, h: int, i: int, e: int, k: int, *, int4: bool = True
              ) -> list[dict[str, Any]]:
    """The three launches' configurations for a call of this shape on ``device`` (tests, benchmarks)."""
    tag = DTYPE_TAG[dtypes.read(x_dtype, "x_dtype", dtypes.HALVES)]
    return [dict(p.info, grid=p.grid[0]) for p in _plan(device, tag, int4, int4, n, h, i, e, k)]


def invalid_slots(device: Device | None = None, stream: int = 0) -> int:
    """How many (token, choice) slots of the last `fused_moe` call on ``device``/``stream`` had an
    expert id outside ``[0, E)`` (skipped). Reads device memory: synchronizes the stream."""
    from .. import scratch
    from ..devices import current_device

    got = np.zeros(COUNTERS + META_WORDS, np.int32)
    return int(got[COUNTERS + 1]) if scratch.pool(device or current_device(), stream).read(META_SLOT, got) else 0


def _torch_stack(w: Any, scales: Any, zeros: Any, perm: Any, group_size: int) -> Any:
    """A torch op's expert weight: the 16-bit stack itself (group_size 0), else the int4 stack's
    prepared arrays (qweight ``[E, M, K/8]``; symmetric when zeros is None)."""
    if not group_size:
        return w
    e, rows, words = (int(d) for d in w.shape) if len(w.shape) == 3 else (0, 0, 0)
    return w4a16.Prepared(w, scales, zeros, perm, int(group_size), (rows, 8 * words), zeros is None, "prepared", e)


def _torch_fused_moe(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any, w13_scales: Any = None,
                     w13_zeros: Any = None, w13_perm: Any = None, w2_scales: Any = None, w2_zeros: Any = None,
                     w2_perm: Any = None, *, out: Any = None, w13_group_size: int = 0, w2_group_size: int = 0,
                     activation: str = "silu", check: bool = False) -> Any:
    """The torch op's form: each expert stack as its tensors and a group size (0: 16-bit experts).
    ``check``: only the op's rules, on fake tensors (`hipskinny.torch_ops.validate`)."""
    a = _torch_stack(w13, w13_scales, w13_zeros, w13_perm, w13_group_size)
    b = _torch_stack(w2, w2_scales, w2_zeros, w2_perm, w2_group_size)
    if not check:
        return fused_moe(x, a, b, topk_weights, topk_ids, activation=activation, out=out)
    if activation not in ACTIVATIONS:
        fused_moe(None, None, None, None, None, activation=activation)        # raises the entry's error
    (o13, p13), (o2, p2) = _parts(a, "w13"), _parts(b, "w2")
    _bind(fake_operands("fused_moe", NAMES, (x, *o13, *o2, topk_weights, topk_ids, out)), p13, p2)
    return None


TORCH_OPS = declare("fused_moe", "Tensor x, Tensor w13, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
                    "Tensor? w13_scales=None, Tensor? w13_zeros=None, Tensor? w13_perm=None, Tensor? w2_scales=None, "
                    "Tensor? w2_zeros=None, Tensor? w2_perm=None", _torch_fused_moe, lambda x, *_: tuple(x),
                    options='int w13_group_size=0, int w2_group_size=0, str activation="silu"',
                    check=functools.partial(_torch_fused_moe, check=True),
                    autograd=autograd.moe("fused_moe"))
EXPORTS = Exports(TORCH_OPS, ("fused_moe",), report=(
    "Fused MoE decode: its work is the routed experts' weights, which depend on the routing, not one [M, K] "
    "matrix the report can scale down with the CU count; `python -m benchmarks.fused_moe` measures whole calls "
    "at real expert shapes."))


# reference

def silu_and_mul_reference(gate: np.ndarray, up: np.ndarray, dtype: Any) -> np.ndarray:
    """vLLM's silu_and_mul on fp32 sums, in T = ``dtype``: cast, silu in fp32, cast, multiply in T."""
    t = dtypes.read(dtype, "dtype", dtypes.HALVES)
    g = gate.astype(np.float32).astype(t).astype(np.float32)
    u = up.astype(np.float32).astype(t).astype(np.float32)
    with np.errstate(over="ignore"):
        s = (g / (np.float32(1) + np.exp(-g))).astype(t).astype(np.float32)
    return (s * u).astype(t)


def fused_moe_reference(x: Any, w13: Any, w2: Any, topk_weights: Any, topk_ids: Any) -> np.ndarray:
    """float64 ``[N, H]`` before out's rounding, from dense weights ``w13 [E, 2I, H]``, ``w2 [E, H, I]``
    (16-bit arrays, or float64 from `w4a16.dequantize_checkpoint`): GEMM1 in float64, rounded as the
    kernels round (`silu_and_mul_reference` in x's dtype), GEMM2 and the weighted sum in float64;
    ids outside ``[0, E)`` contribute nothing."""
    xa = np.asarray(x)
    t = xa.dtype
    w13a, w2a = np.asarray(w13, np.float64), np.asarray(w2, np.float64)
    ids, tw = np.asarray(topk_ids), np.asarray(topk_weights, np.float64)
    e, rows, _ = w13a.shape
    i = rows // 2
    out = np.zeros((xa.shape[0], w2a.shape[1]), np.float64)
    for tok in range(xa.shape[0]):
        xt = xa[tok].astype(np.float64)
        for j in range(ids.shape[1]):
            ex = int(ids[tok, j])
            if not 0 <= ex < e:
                continue
            g13 = w13a[ex] @ xt
            act = silu_and_mul_reference(g13[:i], g13[i:], t).astype(np.float64)
            out[tok] += tw[tok, j] * (w2a[ex] @ act)
    return out
