"""FP8 linear for decode: ``y = (x @ w.T) * scales + bias`` with FP8 e4m3 weights.

Modes (chosen by x's dtype):

* **W8A16**: x fp16/bf16, w FP8 with ``w_scale``; the output has x's dtype.
* **W8A8**: x and w FP8 of one flavour with ``x_scale`` and ``w_scale``; the output is
  ``out_dtype`` (fp16 or bf16; default bf16).

Scales are fp32: ``w_scale`` per tensor ``()``/``[1]``, per channel ``[M]`` or per 128x128 block
``[ceil(M/128), ceil(K/128)]``; ``x_scale`` per tensor, per token ``[N]`` or, with block weight
scales, per token and 128 columns ``[N, ceil(K/128)]`` (`hipskinny.fp8.granularity_of`). NaN or 0
scales propagate. Products are exact, sums fp32, scales applied in fp32 (per 16-column chunk
in block mode, after the sum otherwise), bias added in fp32, one rounding at the end.

Kernels. W8A16 everywhere, and W8A8 on gfx1100/gfx1151 (or with ``native=False``): weights
widened to 16-bit in registers by exact integer operations (NaN encodings poison their
feature), activations staged in LDS as 16-bit (FP8 ones widened there). W8A8 on the archs with
FP8 instructions (`FP8_HARDWARE`; kernels tagged ``fp8``): activations staged as their bytes,
and the bytes go to the instructions as they are (gfx942/gfx950: MFMA 16x16x32 fp8, at N <= 8
used as a 64-lane dot product; gfx1201: ``v_dot4_f32_fp8_fp8`` at N <= 8, WMMA fp8 above).

* N = 1..8 (gfx942/gfx950: N = 2..8 only while N x M x K is small, `_linear.small_n_splitk`),
  ``fp8_linear_<x16|fp8>_<flavour>[_block]_n<N>_y<YTILE>`` (kernels/fp8_linear.hip):
  the lane-split kernels with 16-column chunks, planned by the small-N rules of `ops._linear`
  (x staged as 2 bytes per column, 1 for ``fp8``, after it the block-mode activation scales).
* N = 9..128 (and those larger calls), ``fp8_linear_splitk_<x16|fp8>_<flavour>[_block]_t<NT>``
  (kernels/fp8_linear_splitk.hip): the split-K kernels on the matrix units, planned by the rules
  of `ops._splitk`. Block mode sums each 128-column group on its own and adds it scaled.
Bitwise reproducible across calls, schedules and CU counts.

W8A8 flavour: the flavour the arch's FP8 hardware uses (FNUZ on gfx942, OCP on gfx950/gfx1201;
gfx1100/gfx1151 have none and take both); the other is an error naming `hipskinny.fp8.convert`.

Above N = 128 torch tensors on a ROCm GPU fall back to dequantize + ``F.linear``; anything else
is an error. GPU tensors need K % 16 == 0, unit stride along K, row strides that are
multiples of 16 bytes and 16-byte aligned x and w; host inputs have no layout limits.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .. import autograd, dtypes, operands, registry, tensors
from ..arch import ARCHS
from ..devices.base import Device
from ..errors import InputTypeError, InputValueError
from ..formats import fp8
from ..launch import Launch, LaunchPlan, PlanCache
from ..operands import DeviceCall, HostCall, Operands, Staged
from ..torch_ops import declare, fake_operands, torch_dtype
from . import Exports
from . import _linear as lin
from . import _splitk as splitk
from ._linear import MAX_N, SPLITK_MAX_N, lane_split_plan
from ._splitk import SPLITK_LDS, splitk_plan

FAMILY = "fp8_linear"
SPLITK_FAMILY = "fp8_linear_splitk"
SCALES_LDS = 512                    # split-K block mode: a pass's activation scales
CHUNK = 16                          # K columns per lane chunk
NAMES = ("x", "w", "w_scale", "x_scale", "bias", "out")
# W8A8's flavours by arch: its FP8 instructions' (`ArchInfo.fp8_format`); both where it has none.
NATIVE_W8A8 = {name: (info.fp8_format,) if info.fp8_format else fp8.FLAVORS for name, info in ARCHS.items()}
# Archs with FP8 instructions: W8A8 runs on them (kernels tagged "fp8"): gfx942/gfx950 MFMA
# 16x16x32 fp8 (small N: as a 64-lane dot product), gfx1201 v_dot4_f32_fp8_fp8 / WMMA fp8.
FP8_HARDWARE = tuple(name for name, info in ARCHS.items() if info.fp8_format)
_F16, _BF16, _F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
_plans = PlanCache()
_calls = operands.CallCache()


def fp8_linear(x: Any, w: Any, w_scale: Any, *, x_scale: Any = None, bias: Any = None, out_dtype: Any = None,
               out: Any = None, native: bool | None = None) -> Any:
    """``y = (x @ w.T) * scales + bias`` for N = 1..128 tokens with FP8 e4m3 weights (see the module
    docstring for modes, scale shapes and layouts). x: ``[..., K]`` (leading dims flattened to N
    rows and restored on the output); w: ``[M, K]`` FP8 (float8_e4m3fn or float8_e4m3fnuz);
    bias ``[M]``, ``[1, M]`` or ``[N, M]`` in the output dtype. numpy, torch or DLPack operands,
    all on the host or all on one GPU; the result in x's container kind, or written into ``out``.
    ``native``: W8A8 on the arch's FP8 instructions (None: where it has them; False: the widened
    kernels everywhere; True: an error on an arch without them). W8A16 is differentiable w.r.t. x
    and bias on torch tensors (`hipskinny.autograd`; w and the scales frozen)."""
    if x.__class__ is not np.ndarray and autograd.wanted(x, w, w_scale, x_scale, bias):
        return autograd.through("fp8_linear", out, x, w, w_scale, bias, x_scale, out_dtype=out_dtype)
    objs = (x, w, w_scale, x_scale, bias, out)
    odt = None if out_dtype is None else dtypes.read(out_dtype, "fp8_linear: out_dtype", dtypes.HALVES)
    key, addresses = operands.signature(NAMES, objs, (odt, native))
    call = _calls.get(key)
    if call is None:
        call = _calls.add(key, _bind(operands.gather("fp8_linear", NAMES, objs), odt, native))
    return call(objs, addresses)


def _bind(ops: Operands, out_dtype: np.dtype | None, native: bool | None = None) -> Any:
    xv, wv, wsv, xsv, bv = ops["x"], ops["w"], ops["w_scale"], ops["x_scale"], ops["bias"]
    assert xv is not None and wv is not None and wsv is not None
    n, m, k, names, odt, block = _check(ops, out_dtype)
    out_shape = (*xv.shape[:-1], m)
    operands.check_out(ops, out_shape, odt)
    if n > SPLITK_MAX_N:
        return _unsupported(ops, f"x has N={n} rows (tokens)")
    device = ops.device
    bits = registry.launch_flags(device.arch.name, FAMILY)      # the same in fp8_linear_splitk.hip
    flags = sum(bits[f] for f in names)
    w_flavor = fp8.flavor_of(wv.dtype)
    x8 = "x_fp8" in names
    if x8 and device.arch.name in NATIVE_W8A8 and w_flavor not in NATIVE_W8A8[device.arch.name]:
        raise InputValueError(f"fp8_linear: W8A8 on {device.arch.name} takes "
                              f"{' or '.join(NATIVE_W8A8[device.arch.name])} FP8 (its hardware's flavour); got "
                              f"{w_flavor}: convert x and w with hipskinny.fp8.convert(a8, scale, to="
                              f"{NATIVE_W8A8[device.arch.name][0]!r}), or use W8A16 (16-bit x), which takes both")
    if native and not (x8 and device.arch.fp8_format):
        raise InputValueError(f"fp8_linear: native=True needs FP8 x (W8A8) on an arch with FP8 instructions "
                              f"({', '.join(FP8_HARDWARE)}); got {xv.dtype} x on {device.arch.name}")
    empty = m == 0 or n == 0
    groups = -(-k // 128)
    ws_stride = groups if block else (1 if wsv.shape not in ((), (1,)) else 0)
    xs_stride = 0 if xsv is None else groups if block else (1 if xsv.shape not in ((), (1,)) else 0)
    tag = _tag(device, xv.dtype, native)
    if ops.on_host:
        pitch = -(-k // CHUNK) * CHUNK                # staged rows zero-padded to 16 columns
        b_rows = lin.bias_rows(bv)
        staged = [Staged("fp8_linear.x", n, k, pitch), Staged("fp8_linear.w", m, k, pitch),
                  _scale_rows("fp8_linear.w_scale", wsv, block),
                  None if xsv is None else _scale_rows("fp8_linear.x_scale", xsv, block, optional=True),
                  None if bv is None else Staged("fp8_linear.bias", b_rows, m, m, optional=True)]
        launch, slots = (None, ()) if empty else _launch(device, tag, w_flavor, block, n, m, pitch, pitch, pitch,
                                                          m if b_rows > 1 else 0, ws_stride, xs_stride, flags,
                                                          xsv is not None)
        return HostCall(ops, [launch] if launch else [], staged, out_shape=out_shape, out_dtype=odt,
                        out_slot="fp8_linear.y", scratch_slots=slots)
    if empty:
        return DeviceCall(ops, [], out_shape=out_shape, out_dtype=odt)
    _require(k % CHUNK == 0, f"K must be a multiple of {CHUNK}; got K={k}")
    x_stride = operands.staged_rows("fp8_linear", xv, k)
    w_stride = wv.strides[0]
    _require(wv.strides[1] == 1, "w must be contiguous along K (unit column stride)")
    _require((m == 1 or w_stride >= k) and w_stride % 16 == 0,
             f"w's row stride must be a multiple of 16 elements (16 bytes) and >= K; got {w_stride}")
    for name, v in (("w_scale", wsv), ("x_scale", xsv)):
        _require(v is None or v.is_contiguous, f"{name} must be contiguous")
    b_stride = operands.bias_row_stride("fp8_linear", bv, m)
    launch, slots = _launch(device, tag, w_flavor, block, n, m, k, x_stride, w_stride, b_stride, ws_stride,
                            xs_stride, flags, xsv is not None)
    return DeviceCall(ops, [launch], out_shape=out_shape, out_dtype=odt, aligned=("x", "w"),
                      align_message="x and w must start at 16-byte aligned addresses", scratch_slots=slots)


def _scale_rows(slot: str, v: tensors.TensorView, block: bool, optional: bool = False) -> Staged:
    rows, cols = (v.shape[0], v.shape[1]) if len(v.shape) == 2 else (1, int(np.prod(v.shape, dtype=np.int64)))
    return Staged(slot, rows, cols, cols, optional=optional)


def _check(ops: Operands, out_dtype: np.dtype | None) -> tuple[int, int, int, tuple[str, ...], np.dtype, bool]:
    """Shapes, dtypes and scale granularities; returns N, M, K, the kernels' flags by name (their bits are
    the code object's: the device is not needed yet), output dtype, block mode."""
    xv, wv, wsv, xsv, bv = ops["x"], ops["w"], ops["w_scale"], ops["x_scale"], ops["bias"]
    assert xv is not None and wv is not None and wsv is not None
    w_flavor = fp8.flavor_of(wv.dtype)
    if w_flavor is None:
        raise InputTypeError(f"fp8_linear: w has dtype {wv.dtype}; supported: float8_e4m3fn (OCP), "
                             "float8_e4m3fnuz (FNUZ)")
    x_flavor = fp8.flavor_of(xv.dtype)
    if x_flavor is None and xv.dtype not in (_F16, _BF16):
        raise InputTypeError(f"fp8_linear: x has dtype {xv.dtype}; supported: float16, bfloat16 (W8A16) or "
                             "the weight's FP8 dtype (W8A8)")
    if len(wv.shape) != 2:
        raise InputValueError(f"fp8_linear: w must be 2-D [M, K]; got shape {wv.shape}")
    m, k = wv.shape
    n = lin.tokens("fp8_linear", xv, m, k, "w")
    if k == 0:
        raise InputValueError("fp8_linear: K must be at least 1")
    for name, v in (("w_scale", wsv), ("x_scale", xsv)):
        if v is not None and v.dtype != _F32:
            raise InputTypeError(f"fp8_linear: {name} has dtype {v.dtype}; supported: float32")
    w_gran = fp8.granularity_of(m, k, wsv.shape, "w", name="w_scale")
    block = w_gran == "block"
    if x_flavor is None:                                  # W8A16
        if xsv is not None:
            raise InputValueError("fp8_linear: x_scale is for FP8 activations (W8A8); x is "
                                  f"{xv.dtype}, which is used as it is")
        odt = xv.dtype
        if out_dtype is not None and out_dtype != odt:
            raise InputValueError(f"fp8_linear: with {xv.dtype} x (W8A16) the output is {xv.dtype}; "
                                  f"got out_dtype={out_dtype}")
        flags = ("out_bf16",) if odt == _BF16 else ()
    else:                                                 # W8A8
        if x_flavor != w_flavor:
            raise InputTypeError(f"fp8_linear: x is {xv.dtype} but w is {wv.dtype}; W8A8 needs one FP8 flavour "
                                 "(hipskinny.fp8.convert changes one)")
        if xsv is None:
            raise InputValueError("fp8_linear: FP8 x (W8A8) needs x_scale")
        x_gran = fp8.granularity_of(n, k, xsv.shape, "x", name="x_scale")
        if block != (x_gran == "group"):
            raise InputValueError(f"fp8_linear: w_scale is per {w_gran} and x_scale per {x_gran}; 128x128 "
                                  f"block weight scales go with per-token-group activation scales "
                                  f"[N, ceil(K/128)] = [{n}, {-(-k // 128)}], and per-tensor/per-channel "
                                  "weight scales with per-tensor/per-token activation scales")
        odt = out_dtype or _BF16
        flags = ("x_fp8", *(("x_fnuz",) if x_flavor == "fnuz" else ()), *(("out_bf16",) if odt == _BF16 else ()))
    if bv is not None and bv.dtype != odt:
        raise InputTypeError(f"fp8_linear: bias has dtype {bv.dtype}; it must be the output dtype {odt}")
    lin.check_bias("fp8_linear", bv, n, m)
    if m >= 2**31 or k >= 2**31:
        raise InputValueError(f"fp8_linear: M and K must be below 2**31; got M={m}, K={k}")
    return n, m, k, flags, odt, block


def _tag(device: Device, x_dtype: np.dtype, native: bool | None) -> str:
    """The kernels' x tag: "fp8" for W8A8 on the FP8 instructions (the bytes as they are), else the
    16-bit type x is staged in (FP8 activations widened to fp16)."""
    if fp8.flavor_of(x_dtype) is not None and native is not False and device.arch.fp8_format:
        return "fp8"
    return "bf16" if x_dtype == _BF16 else "f16"


def _launch(device: Device, tag: str, flavor: str, block: bool, n: int, m: int, k: int, x_stride: int,
            w_stride: int, b_stride: int, ws_stride: int, xs_stride: int, flags: int,
            x_scaled: bool) -> tuple[Launch, tuple[tuple[str, int], ...]]:
    """The launch of a call of this shape, and the scratch slots it needs (split-K partials, counters)."""
    plan = _plan(device, tag, flavor, block, n, m, k, x_scaled)
    return splitk.linear_launch(device, plan, NAMES, dict(x="x", w="w", w_scale="w_scale", x_scale="x_scale",
                                                          bias="bias", y="out"),
                           dict(M=m, K=k, x_stride=x_stride, w_stride=w_stride, bias_stride=b_stride,
                                ws_stride=ws_stride, xs_stride=xs_stride, flags=flags), n,
                           "fp8_linear.partials", "fp8_linear.counters")


def _plan(device: Device, tag: str, flavor: str, block: bool, n: int, m: int, k: int, x_scaled: bool) -> LaunchPlan:
    if n > MAX_N or lin.small_n_splitk(FAMILY, device.arch.name, n, m, k):
        return _plan_splitk(device, tag, flavor, block, n, m, k)
    key = (device, tag, flavor, block, n, m, k, x_scaled, device.properties.cu_count)
    prefix = f"{FAMILY}_{tag}_{flavor}{'_block' if block else ''}_n{n}"
    # staged x: FP8 bytes or 16-bit; block mode: the activation scales of every 128-column group after it
    return _plans.get(key, lambda: lane_split_plan(
        device, FAMILY, prefix, n, m, k, chunk=CHUNK, op="fp8_linear", elem=1 if tag == "fp8" else 2,
        reserved=4 * n * -(-k // 128) if block and x_scaled else 0))


def _plan_splitk(device: Device, tag: str, flavor: str, block: bool, n: int, m: int, k: int) -> LaunchPlan:
    """skinny_gemm's split-K configuration (`skinny_gemm.splitk_plan`), deterministic; block scales
    take LDS too."""
    key = (device, tag, flavor, block, n, m, k, device.properties.cu_count)
    prefix = f"{SPLITK_FAMILY}_{tag}_{flavor}{'_block' if block else ''}"
    return _plans.get(key, lambda: splitk_plan(device, SPLITK_FAMILY, lambda nt, _: f"{prefix}_t{nt}", n, m, k,
                                               lds=SPLITK_LDS + (SCALES_LDS if block else 0), weight_bits=8,
                                               x_bytes=1 if tag == "fp8" else 2))


def plan_info(device: Device, x_dtype: Any, n: int, m: int, k: int, *, w_flavor: str = "ocp", block: bool = False,
              x_scaled: bool = False, native: bool | None = None) -> dict[str, Any]:
    """The configuration a call of this shape gets on ``device`` (for tests and benchmarks; x_dtype
    is x's dtype: fp16/bf16 for W8A16, an FP8 dtype for W8A8)."""
    tag = _tag(device, dtypes.read(x_dtype, "x_dtype", (*dtypes.HALVES, dtypes.E4M3FN, dtypes.E4M3FNUZ)), native)
    return dict(_plan(device, tag, w_flavor, block, n, m, k, x_scaled).info)


class _TorchFallback:
    """N > 128 on a ROCm GPU: dequantize the weight and use ``F.linear`` (what torch has everywhere)."""

    def __call__(self, objs: Any, addresses: Any) -> Any:
        import torch
        import torch.nn.functional as F  # noqa: N812

        x, w, w_scale, x_scale, bias, out = objs
        wd = fp8.dequantize(w.cpu(), w_scale.cpu()).to(x.device)
        if fp8.flavor_of(x) is not None:
            xd = fp8.dequantize(x.reshape(-1, x.shape[-1]).cpu(), x_scale.cpu()).to(x.device)
            x, dt = xd.reshape(*x.shape[:-1], -1), (out.dtype if out is not None else torch.bfloat16)
        else:
            dt = x.dtype
        y = F.linear(x.float(), wd)
        if bias is not None:
            y = y + bias.float().reshape(y.shape if bias.dim() == 2 and bias.shape[0] > 1 else (y.shape[-1],))
        y = y.to(dt)
        if out is None:
            return y
        out.copy_(y)
        return out


def _unsupported(ops: Operands, why: str) -> Any:
    return lin.outside(ops, "fp8_linear", why, _TorchFallback, f"N = 1..{SPLITK_MAX_N} tokens (torch tensors on a "
                       "ROCm GPU fall back to dequantize + torch.nn.functional.linear above that)")


def _require(ok: bool, what: str) -> None:
    operands.require("fp8_linear", ok, what)


def _torch_fp8_linear(x: Any, w: Any, w_scale: Any, bias: Any = None, x_scale: Any = None, *, out: Any = None,
                      out_dtype: Any = None) -> Any:
    """The torch op's form: bias and x_scale positional (autograd sees only positional tensors)."""
    return fp8_linear(x, w, w_scale, x_scale=x_scale, bias=bias, out_dtype=out_dtype, out=out)


def _torch_check(x: Any, w: Any, w_scale: Any, bias: Any = None, x_scale: Any = None, *, out: Any = None,
                 out_dtype: Any = None) -> None:
    """The op's bind-time rules on fake tensors (`hipskinny.torch_ops.validate`)."""
    odt = None if out_dtype is None else dtypes.read(out_dtype, "fp8_linear: out_dtype", dtypes.HALVES)
    _bind(fake_operands("fp8_linear", NAMES, (x, w, w_scale, x_scale, bias, out)), odt)


def _grad_weights(inputs: tuple[Any, ...]) -> dict[str, Any]:
    if fp8.flavor_of(inputs[0]) is not None:
        raise InputValueError(f"fp8_linear: gradients are computed for W8A16 (float16/bfloat16 x) only; x is "
                              f"{inputs[0].dtype} (W8A8)")
    return {"w": inputs[1], "w_scale": inputs[2], "x_scale": inputs[4]}


# torch.ops.hipskinny.fp8_linear / fp8_linear_out (registered by hipskinny.torch_ops).
TORCH_OPS = declare("fp8_linear", "Tensor x, Tensor w, Tensor w_scale, Tensor? bias=None, Tensor? x_scale=None",
                    _torch_fp8_linear, lambda x, w, w_scale, bias=None, x_scale=None: (*x[:-1], w[0]),
                    options="ScalarType? out_dtype=None",
                    out_dtype=lambda x, *_, out_dtype=None, **__: (
                        x.dtype if fp8.flavor_of(x) is None else out_dtype or torch_dtype("bfloat16")),
                    check=_torch_check,
                    autograd=autograd.linear("fp8_linear", 3, _grad_weights,
                                             lambda named, *_: fp8.dequantize(named["w"], named["w_scale"])))
EXPORTS = Exports(TORCH_OPS, ("fp8_linear", "fp8_linear_splitk"))


def fp8_linear_reference(x: Any, w: Any, w_scale: Any, x_scale: Any = None, bias: Any = None,
                         out_dtype: Any = None) -> np.ndarray:
    """The exact semantics in float64: the FP8 values exactly (`hipskinny.fp8.decode`), scaled per
    element by their granularity's scales, summed exactly enough (K terms, < K * 2**-53
    relative), bias added, one rounding to the output dtype (`fp8_linear_exact` is the value before
    it)."""
    y = fp8_linear_exact(x, w, w_scale, x_scale, bias)
    xa = np.asarray(x)
    odt = (dtypes.read(out_dtype, "fp8_linear_reference: out_dtype", dtypes.HALVES) if out_dtype is not None
           else _BF16 if fp8.flavor_of(xa) else xa.dtype)
    return y.astype(odt)


def fp8_linear_exact(x: Any, w: Any, w_scale: Any, x_scale: Any = None, bias: Any = None) -> np.ndarray:
    """`fp8_linear_reference` before its final rounding (float64, shape ``[..., M]``)."""
    xa, wa = np.asarray(x), np.asarray(w)
    x2 = xa.reshape(-1, wa.shape[1])
    xd = _deq64(x2, x_scale, "x") if fp8.flavor_of(xa) else x2.astype(np.float64)
    return lin.linear_reference(xd.reshape(*xa.shape[:-1], -1), _deq64(wa, w_scale, "w"), bias)


def _deq64(a8: np.ndarray, scale: Any, role: str) -> np.ndarray:
    """FP8 values times their scales, exactly (``role``: "x" or "w", for the scale's granularity)."""
    s = np.asarray(scale, np.float64)
    return fp8.dequantize(a8, s, granularity=fp8.granularity_of(*a8.shape, s.shape, role), exact=True)
