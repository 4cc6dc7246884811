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

from .. import registry, scratch, tensors
from ..devices import current_device, hip_device
from ..devices.base import Device
from ..errors import InputValueError
from ..launch import LaunchPlan, PlanCache, make_plan
from ._common import check_16bit_dtypes

FAMILY = "gemv"
THREADS = 256
ROWS_PER_GROUP = (8, 4, 2, 1)       # kernel variants, largest first
_MAX_DIM = 2**31 - 1
_plans = PlanCache()


def rows_per_group(m: int, cu_count: int) -> int:
    """Rows per workgroup: the most rows (fewest re-reads of x) that still give every
    CU at least two workgroups; 1 when M is too small for that."""
    for r in ROWS_PER_GROUP:
        if -(-m // r) >= 2 * cu_count:
            return r
    return 1


def gemv(x: Any, w: Any, bias: Any = None, *, out: Any = None) -> Any:
    """``y = x @ w.T + bias`` for one token.

    x: ``[K]`` or ``[1, K]``; w: ``[M, K]``; bias: ``[M]`` or ``[1, M]`` or None. All fp16 or
    all bf16; numpy arrays, torch tensors (CPU or ROCm) or DLPack objects, all on the host or
    all on the same GPU. Returns ``[M]`` or ``[1, M]`` (following x) of the input dtype, in
    the container kind of x, or writes it into ``out`` (contiguous, same device) and returns it.
    """
    xv, wv = tensors.view(x, "x"), tensors.view(w, "w")
    bv = None if bias is None else tensors.view(bias, "bias")
    ov = None if out is None else tensors.view(out, "out")
    m, k, tag = _check_shapes(xv, wv, bv)
    out_shape = (m,) if len(xv.shape) == 1 else (1, m)
    tensors.same_device([v for v in (xv, wv, bv, ov) if v is not None])
    if ov is not None and (ov.shape != out_shape or ov.dtype != xv.dtype or not ov.is_contiguous or ov.readonly):
        raise InputValueError(f"gemv: out must be a writable contiguous {xv.dtype} array of shape {out_shape}; "
                              f"got {ov.dtype} {ov.shape}{' (read-only)' if ov.readonly else ''}")
    if xv.on_host:
        return _run_host(xv, wv, bv, ov, m, k, tag, out_shape)
    return _run_device(xv, wv, bv, ov, m, k, tag, out_shape)


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
        return make_plan(fn, meta, (-(-m // r), 1, 1), (THREADS, 1, 1),
                         info={"kernel": name, "rows_per_group": r})

    return _plans.get(key, build)


def _launch(device: Device, plan: LaunchPlan, ptrs: tuple[int, int, int, int], m: int, k: int,
            w_stride: int, stream: int) -> None:
    kernarg = plan.kernarg((*ptrs, m, k, w_stride))
    device.launch(plan.function, plan.grid, plan.block, kernarg, plan.shared_mem, stream)


def _run_host(xv: tensors.TensorView, wv: tensors.TensorView, bv: tensors.TensorView | None,
              ov: tensors.TensorView | None, m: int, k: int, tag: str, out_shape: tuple[int, ...]) -> Any:
    device = current_device()
    if m == 0:
        return ov.obj if ov is not None else tensors.to_kind(np.empty(out_shape, xv.dtype), xv)
    w_host = wv.host_array()
    w_stride = -(-k // 8) * 8
    if w_host.shape[1] != w_stride or not w_host.flags.c_contiguous:
        padded = np.zeros((m, w_stride), dtype=w_host.dtype)   # rows padded to 16 bytes
        padded[:, :k] = w_host
        w_host = padded
    x_host = np.ascontiguousarray(xv.host_array().reshape(k))
    pool = scratch.pool(device, 0)
    item = xv.itemsize
    x_d = pool.buffer("gemv.x", max(k, 1) * item)
    w_d = pool.buffer("gemv.w", w_host.nbytes)
    y_d = pool.buffer("gemv.y", m * item)
    device.copy_to_device(x_d, x_host, k * item)
    device.copy_to_device(w_d, w_host, w_host.nbytes)
    b_d = 0
    if bv is not None:
        b_host = np.ascontiguousarray(bv.host_array().reshape(m))
        b_d = pool.buffer("gemv.bias", m * item)
        device.copy_to_device(b_d, b_host, m * item)
    _launch(device, _plan(device, tag, m, k, w_stride), (x_d, w_d, b_d, y_d), m, k, w_stride, 0)
    y = ov.host_array() if ov is not None else np.empty(out_shape, dtype=xv.dtype)
    device.copy_to_host(y, y_d, m * item)
    device.synchronize(0)
    return ov.obj if ov is not None else tensors.to_kind(y, xv)


def _run_device(xv: tensors.TensorView, wv: tensors.TensorView, bv: tensors.TensorView | None,
                ov: tensors.TensorView | None, m: int, k: int, tag: str, out_shape: tuple[int, ...]) -> Any:
    device = hip_device(xv.device_id)
    out, yv = (ov.obj, ov) if ov is not None else tensors.new_output(xv, out_shape, xv.dtype)
    if m == 0:
        return out
    w_stride = wv.strides[0]
    _require(xv.strides[-1] == 1 or k == 1, "x must be contiguous along K")
    _require(wv.strides[1] == 1 or k == 1, "w must be contiguous along K (unit column stride)")
    _require(w_stride >= k and w_stride % 8 == 0,
             f"w's row stride must be a multiple of 8 elements (16 bytes) and >= K; got {w_stride}")
    _require(xv.ptr % 16 == 0 and wv.ptr % 16 == 0, "x and w must start at 16-byte aligned addresses")
    if bv is not None:
        _require(bv.strides[-1] == 1 or m == 1, "bias must be contiguous")
    stream = tensors.torch_current_stream(xv)
    ptrs = (xv.ptr, wv.ptr, bv.ptr if bv is not None else 0, yv.ptr)
    _launch(device, _plan(device, tag, m, k, w_stride), ptrs, m, k, w_stride, stream)
    return out


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise InputValueError(f"gemv on a GPU tensor: {what} (host inputs have no layout limits)")


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
