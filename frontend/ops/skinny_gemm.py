"""Skinny GEMM for decode: ``y = x @ W.T + bias`` for N = 1..128 tokens.

fp16 or bf16 in and out, fp32 accumulation, bias added in fp32, one rounding at the end.
Two kernel families:

* N = 1..8, ``skinny_gemm_<dtype>_n<N>_y<YTILE>`` (kernels/skinny_gemm.hip): each wave
  owns YTILE consecutive output rows x all N tokens and reduces over the whole K across
  its lanes (dot2 instructions); x is staged in LDS, once per workgroup when
  ``N * K_pad * 2`` bytes fit the arch's LDS per workgroup, otherwise streamed through it
  in K-chunks.
* N = 9..128, ``skinny_gemm_splitk_<dtype>_t<NT>[_atomic]`` (kernels/skinny_gemm_splitk.hip):
  matrix units (MFMA / WMMA) on 128-feature x 16*NT-token tiles, K split into shards
  across workgroups, shard partials reduced by the last workgroup to arrive.

The configuration rules of both kernel families (K-chunk, workgroups per CU, YTILE, grid; token
tiles, shards, scratch) are the linear-op skeleton's: `hipskinny.ops._linear`.

Routing by N (rows of x after flattening leading dims):

* N = 1..8: the small-N kernel. N = 1 is *not* routed to `hipskinny.gemv`: gemv re-reads
  x once per R <= 8 output rows while this kernel reads it once per workgroup (<= 2 per
  CU), so gemv moves fewer bytes only for M < 8 * workgroups -- a few KiB at most -- and
  a CU-count-dependent route would break bitwise equality across CU counts.
* N = 9..128: the split-K kernel. It needs K % 8 == 0 for device tensors (host inputs
  are padded).
* N > 128, or K % 8 != 0 for device tensors at N > 8: torch tensors on a ROCm GPU fall
  back to ``torch.nn.functional.linear`` (logged at debug level); anything else raises
  `InputValueError` naming the supported ranges.

Host inputs are staged through the device's scratch pool (rows padded to 16 bytes, so any
layout works); device tensors are used in place and must have unit stride along K, row
strides that are multiples of 8 elements and 16-byte aligned bases.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd, dtypes, operands, tensors
from ..devices.base import Device
from ..errors import InputValueError
from ..operands import DeviceCall, HostCall, Operands, Staged
from ..torch_ops import declare, fake_operands
from . import Exports
from . import _linear as lin
from . import _skinny as sk
from ._common import DTYPE_TAG, check_16bit_dtypes
from ._linear import MAX_N, SPLITK_MAX_N
from ._skinny import FAMILY as FAMILY
from ._skinny import NAMES
from ._skinny import SPLITK_FAMILY as SPLITK_FAMILY

_MAX_DIM = 2**31 - 1
_calls = operands.CallCache()


def skinny_gemm(x: Any, w: Any, bias: Any = None, *, deterministic: bool = True, out: Any = None) -> Any:
    """``y = x @ w.T + bias`` for N = 1..128 tokens, like ``torch.nn.functional.linear``.

    x: ``[..., K]`` (leading dims flattened to N rows and restored on the output);
    w: ``[M, K]``; bias: ``[M]``, ``[1, M]`` or ``[N, M]`` (per token) or None. All fp16 or all
    bf16; numpy arrays, torch tensors (CPU or ROCm) or DLPack objects, all on the host or all
    on one GPU. Returns ``[..., M]`` of the input dtype in x's container kind, or writes it
    into ``out`` (contiguous, same device) and returns that. ``deterministic`` (default): results
    are bitwise reproducible across calls, schedules and CU counts. ``False`` lets N > 8
    calls whose K is split into shards add the shard partials atomically (less scratch
    traffic; the last bits then depend on arrival order). N <= 8 is always deterministic.
    Differentiable w.r.t. x and bias on torch tensors (`hipskinny.autograd`; w frozen).
    """
    if x.__class__ is not np.ndarray and autograd.wanted(x, w, bias):
        return autograd.through("skinny_gemm", out, x, w, bias, deterministic=deterministic)
    objs = (x, w, bias, out)
    key, addresses = operands.signature(NAMES, objs, deterministic)
    call = _calls.get(key)
    if call is None:
        call = _calls.add(key, _bind(operands.gather("skinny_gemm", NAMES, objs), deterministic))
    return call(objs, addresses)


def _bind(ops: Operands, deterministic: bool) -> Any:
    xv, wv, bv = ops["x"], ops["w"], ops["bias"]
    assert xv is not None and wv is not None
    n, m, k, tag = _check_shapes(xv, wv, bv)
    out_shape = (*xv.shape[:-1], m)
    operands.check_out(ops, out_shape, xv.dtype)
    atomic = not deterministic and n > MAX_N
    if n > SPLITK_MAX_N:
        return _unsupported(ops, f"x has N={n} rows (tokens)")
    device, empty = ops.device, m == 0 or n == 0
    if ops.on_host:
        pitch = -(-k // 8) * 8                       # staged rows padded to 16 bytes
        b_rows = lin.bias_rows(bv)
        # The zero padding past K contributes nothing, so the split-K kernel gets K rounded up to 8.
        k_kernel = pitch if n > MAX_N else k
        staged = [Staged("skinny_gemm.x", n, k, pitch), Staged("skinny_gemm.w", m, k, pitch),
                  None if bv is None else Staged("skinny_gemm.bias", b_rows, m, m, optional=True)]
        launch, slots = (None, ()) if empty else sk.launch(device, tag, n, m, k_kernel, atomic, pitch, pitch,
                                                            m if b_rows > 1 else 0)
        return HostCall(ops, [launch] if launch else [], staged, out_shape=out_shape, out_dtype=xv.dtype,
                        out_slot="skinny_gemm.y", scratch_slots=slots)
    if n > MAX_N and k % 8 != 0:
        return _unsupported(ops, f"K={k} is not a multiple of 8 (needed for N > {MAX_N} on a GPU)")
    if empty:
        return DeviceCall(ops, [], out_shape=out_shape, out_dtype=xv.dtype)
    x_stride = operands.staged_rows("skinny_gemm", xv, k)
    w_stride = wv.strides[0]
    _require(wv.strides[1] == 1 or k == 1, "w must be contiguous along K (unit column stride)")
    _require((m == 1 or w_stride >= k) and w_stride % 8 == 0,
             f"w's row stride must be a multiple of 8 elements (16 bytes) and >= K; got {w_stride}")
    b_stride = operands.bias_row_stride("skinny_gemm", bv, m)
    launch, slots = sk.launch(device, tag, n, m, k, atomic, x_stride, w_stride, b_stride)
    return DeviceCall(ops, [launch], out_shape=out_shape, out_dtype=xv.dtype, aligned=("x", "w"),
                      align_message="x and w must start at 16-byte aligned addresses", scratch_slots=slots)


def _unsupported(ops: Operands, why: str) -> Any:
    per_token = lin.bias_rows(ops["bias"]) > 1
    return lin.outside(ops, "skinny_gemm", why, lambda: sk.TorchLinear(per_token),
                       f"N = 1..{SPLITK_MAX_N} tokens, any K for host inputs, K % 8 == 0 for GPU tensors when "
                       f"N > {MAX_N} (torch tensors on a ROCm GPU fall back to torch.nn.functional.linear "
                       "outside that)")


def _check_shapes(xv: tensors.TensorView, wv: tensors.TensorView,
                  bv: tensors.TensorView | None) -> tuple[int, int, int, str]:
    tag = check_16bit_dtypes("skinny_gemm", xv, wv, bv)
    if len(wv.shape) != 2:
        raise InputValueError(f"skinny_gemm: w must be 2-D [M, K]; got shape {wv.shape}")
    m, k = wv.shape
    n = lin.tokens("skinny_gemm", xv, m, k, "w")
    lin.check_bias("skinny_gemm", bv, n, m)
    if m > _MAX_DIM or k > _MAX_DIM or n * max(m, k) > 2**62:
        raise InputValueError(f"skinny_gemm: M and K must be below 2**31; got M={m}, K={k}")
    if k == 0:
        raise InputValueError("skinny_gemm: K must be at least 1")
    return n, m, k, tag


def plan_info(device: Device, dtype: Any, n: int, m: int, k: int, *, deterministic: bool = True) -> dict[str, Any]:
    """The configuration a call of this shape gets on ``device`` (for tests and benchmarks)."""
    tag = DTYPE_TAG[dtypes.read(dtype, "dtype", dtypes.HALVES)]
    return dict(sk.plan(device, tag, n, m, k, not deterministic and n > MAX_N).info)


def _require(ok: bool, what: str) -> None:
    operands.require("skinny_gemm", ok, what)


def _torch_check(x: Any, w: Any, bias: Any = None, *, out: Any = None, deterministic: bool = True) -> None:
    """The op's bind-time rules on fake tensors (`hipskinny.torch_ops.validate`)."""
    _bind(fake_operands("skinny_gemm", NAMES, (x, w, bias, out)), deterministic)


# torch.ops.hipskinny.skinny_gemm / skinny_gemm_out (registered by hipskinny.torch_ops).
TORCH_OPS = declare("skinny_gemm", "Tensor x, Tensor w, Tensor? bias=None", skinny_gemm,
                    lambda x, w, bias=None: (*x[:-1], w[0]), options="bool deterministic=True", check=_torch_check,
                    autograd=autograd.linear("skinny_gemm", 2, lambda a: {"w": a[1]}, lambda named, *_: named["w"],
                                             opaque=False))
EXPORTS = Exports(TORCH_OPS, ("skinny_gemm", "skinny_gemm_splitk"))


def skinny_gemm_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The exact semantics: every product and the sum taken exactly (float64: 16-bit products
    are exact and K terms lose < K * 2**-53 relative), bias ([M], [1, M] or [N, M]) added,
    then round-to-nearest-even to the input dtype (for bfloat16 ml_dtypes goes through
    float32, a double rounding that can move an exact tie by one ulp). x is ``[..., K]``; the
    result is ``[..., M]``."""
    return lin.linear_reference(x, np.asarray(w).astype(np.float64), bias).astype(np.asarray(x).dtype)
