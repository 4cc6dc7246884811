"""GEMV for decode: ``y = x @ W.T (+ bias)`` with one token (x ``[1, K]`` or ``[K]``).

fp16 or bf16 in and out, fp32 accumulation, one rounding at the end. Kernels
``gemv_<dtype>_r<R>`` (kernels/gemv.hip): a 256-thread workgroup owns R output
rows and splits K over its threads in 16-byte chunks. Any M and K; W rows may be
padded (row stride a multiple of 8 elements, 16-byte aligned). Host inputs are
staged through the device's scratch pool (W rows padded there, so any K works);
device tensors are used in place and must meet the alignment rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd, operands, registry, tensors
from ..devices.base import Device
from ..errors import InputValueError
from ..launch import Launch, LaunchPlan, PlanCache, make_launch, make_plan
from ..operands import DeviceCall, HostCall, Operands, Staged
from ..torch_ops import declare, fake_operands
from . import Exports
from ._common import check_16bit_dtypes

FAMILY = "gemv"
ROWS_PER_GROUP = (8, 4, 2, 1)       # kernel variants, largest first
_MAX_DIM = 2**31 - 1
NAMES = ("x", "w", "bias", "out")
_plans = PlanCache()
_calls = operands.CallCache()


# benchmarks.choices predicts 1, 2, 4 and 8 within 6% of each other on every swept row; the small
# gains of 4-8 (gfx950 Qwen3 o_proj: 2.73 -> 2.56 us) come from the latency floor's weighting, which
# counts the extra re-reads of x as fast L2 hits while a wave's chain waits on W from DRAM. Two keep
# the re-reads few and still give every CU a second workgroup to switch to.
GROUPS_PER_CU = 2


def rows_per_group(m: int, cu_count: int) -> int:
    """Rows per workgroup: the most rows (fewest re-reads of x) that still give every
    CU at least GROUPS_PER_CU workgroups; 1 when M is too small for that."""
    for r in ROWS_PER_GROUP:
        if -(-m // r) >= GROUPS_PER_CU * cu_count:
            return r
    return 1


def gemv(x: Any, w: Any, bias: Any = None, *, out: Any = None) -> Any:
    """``y = x @ w.T + bias`` for one token.

    x: ``[K]`` or ``[1, K]``; w: ``[M, K]``; bias: ``[M]`` or ``[1, M]`` or None. All fp16 or
    all bf16; numpy arrays, torch tensors (CPU or ROCm) or DLPack objects, all on the host or
    all on the same GPU. Returns ``[M]`` or ``[1, M]`` (following x) of the input dtype, in
    the container kind of x, or writes it into ``out`` (contiguous, same device) and returns it.
    Differentiable w.r.t. x and bias on torch tensors (`hipskinny.autograd`; w frozen).
    """
    if x.__class__ is not np.ndarray and autograd.wanted(x, w, bias):
        return autograd.through("gemv", out, x, w, bias)
    objs = (x, w, bias, out)
    key, addresses = operands.signature(NAMES, objs)
    call = _calls.get(key)
    if call is None:
        call = _calls.add(key, _bind(operands.gather("gemv", NAMES, objs)))
    return call(objs, addresses)


def _bind(ops: Operands) -> Any:
    xv, wv, bv = ops["x"], ops["w"], ops["bias"]
    assert xv is not None and wv is not None
    m, k, tag = _check_shapes(xv, wv, bv)
    out_shape = (m,) if len(xv.shape) == 1 else (1, m)
    operands.check_out(ops, out_shape, xv.dtype)
    device = ops.device
    if ops.on_host:
        w_stride = -(-k // 8) * 8       # staged rows padded to 16 bytes
        launches = [] if m == 0 else [_launch(device, tag, m, k, w_stride)]
        staged = [Staged("gemv.x", 1, k, k), Staged("gemv.w", m, k, w_stride),
                  None if bv is None else Staged("gemv.bias", 1, m, m, optional=True)]
        return HostCall(ops, launches, staged, out_shape=out_shape, out_dtype=xv.dtype, out_slot="gemv.y")
    w_stride = wv.strides[0]
    if m:
        _require(xv.strides[-1] == 1 or k == 1, "x must be contiguous along K")
        _require(wv.strides[1] == 1 or k == 1, "w must be contiguous along K (unit column stride)")
        _require(w_stride >= k and w_stride % 8 == 0,
                 f"w's row stride must be a multiple of 8 elements (16 bytes) and >= K; got {w_stride}")
        if bv is not None:
            _require(bv.strides[-1] == 1 or m == 1, "bias must be contiguous")
    launches = [] if m == 0 else [_launch(device, tag, m, k, w_stride)]
    return DeviceCall(ops, launches, out_shape=out_shape, out_dtype=xv.dtype, aligned=("x", "w") if m else (),
                      align_message="x and w must start at 16-byte aligned addresses")


def _launch(device: Device, tag: str, m: int, k: int, w_stride: int) -> Launch:
    return make_launch(device, _plan(device, tag, m, k, w_stride), NAMES,
                           x="x", w="w", bias="bias", y="out", M=m, K=k, w_stride=w_stride)


def _check_shapes(xv: tensors.TensorView, wv: tensors.TensorView,
                  bv: tensors.TensorView | None) -> tuple[int, int, str]:
    tag = check_16bit_dtypes("gemv", xv, wv, bv)
    if len(wv.shape) != 2:
        raise InputValueError(f"gemv: w must be 2-D [M, K]; got shape {wv.shape}")
    m, k = wv.shape
    if len(xv.shape) not in (1, 2) or (len(xv.shape) == 2 and xv.shape[0] != 1):
        raise InputValueError(f"gemv: x must be [K] or [1, K] (one token); got shape {xv.shape}")
    if xv.shape[-1] != k:
        raise InputValueError(f"gemv: x has K={xv.shape[-1]} but w is [M={m}, K={k}]")
    if bv is not None and bv.shape not in ((m,), (1, m)):
        raise InputValueError(f"gemv: bias must be [M] or [1, M] with M={m}; got shape {bv.shape}")
    if m > _MAX_DIM or k > _MAX_DIM:
        raise InputValueError(f"gemv: M and K must be below 2**31; got M={m}, K={k}")
    return m, k, tag


def _plan(device: Device, tag: str, m: int, k: int, w_stride: int) -> LaunchPlan:
    cu_count = device.properties.cu_count
    key = (device, tag, m, k, w_stride, cu_count)

    def build() -> LaunchPlan:
        r = rows_per_group(m, cu_count)
        name = f"gemv_{tag}_r{r}"
        fn, meta = registry.load(device, FAMILY).kernel(name)
        return make_plan(fn, meta, (-(-m // r), 1, 1),
                         info={"kernel": name, "rows_per_group": r})

    return _plans.get(key, build)


def _require(ok: bool, what: str) -> None:
    operands.require("gemv", ok, what)


def _torch_check(x: Any, w: Any, bias: Any = None, *, out: Any = None) -> None:
    """The op's bind-time rules on fake tensors (`hipskinny.torch_ops.validate`)."""
    _bind(fake_operands("gemv", NAMES, (x, w, bias, out)))


# torch.ops.hipskinny.gemv / gemv_out (registered by hipskinny.torch_ops when torch is there).
TORCH_OPS = declare("gemv", "Tensor x, Tensor w, Tensor? bias=None", gemv,
                    lambda x, w, bias=None: (w[0],) if len(x) == 1 else (1, w[0]), check=_torch_check,
                    autograd=autograd.linear("gemv", 2, lambda a: {"w": a[1]}, lambda named, *_: named["w"],
                                             opaque=False))
EXPORTS = Exports(TORCH_OPS, ("gemv",))


def gemv_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The exact semantics: every product and the sum taken exactly (float64 is exact
    enough here: 16-bit products are exact and K terms lose < K * 2**-53 relative),
    bias added, then round-to-nearest-even to the input dtype (numpy rounds float64 to
    float16 directly; ml_dtypes goes through float32 for bfloat16, a double rounding that
    can move a result by at most one bf16 ulp on exact ties). Shape follows x."""
    dtype = np.asarray(x).dtype
    x64 = np.asarray(x).astype(np.float64)
    w64 = np.asarray(w).astype(np.float64)
    y = x64.reshape(-1) @ w64.T
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64).reshape(-1)
    return y.astype(dtype).reshape((w64.shape[0],) if x64.ndim == 1 else (1, w64.shape[0]))
