"""bitsandbytes 4-bit (NF4/FP4) linear for decode: ``y = x @ dequantize_4bit(packed, state).T + bias``.

The weight is bitsandbytes' own format (`hipskinny.bnb`): ``[M, K]`` packed two codes per byte
(high nibble first), blockwise absmax (fp32, or nested: uint8 codes through the 256-entry map,
fp32 per 256 blocks, offset), the 16-entry codebook of the state (NF4 or FP4). x is fp16 or
bf16 ``[..., K]``; y has x's dtype. fp32 x is an error (bitsandbytes takes it; cast x, or use
`hipskinny.bnb.dequantize_4bit`). Sums are fp32 on every arch, bias added in fp32, one rounding
at the end.

N = 1..8 (but see below), kernel ``matmul_4bit_<f16|bf16>_n<N>_y<YTILE>`` (kernels/matmul_4bit.hip): the
lane-split kernels with 32-column (16-byte) chunks, planned by the small-N rules of
`ops._linear` (x staged after the codebooks' static LDS). Each chunk's products ``x * code[q]``
(exact in fp32 FMAs) are summed, scaled by the block's absmax (decoded in the kernel when
nested) and added: the weights are never rounded.

N = 9..64, kernel ``matmul_4bit_splitk_<f16|bf16>_t<NT>`` (kernels/matmul_4bit_splitk.hip): the
split-K kernels on the matrix units, planned by the rules of `ops._linear`. Each weight is
widened in registers to x's dtype as ``T(code[q] * absmax)``, the fp32 product rounded once --
the values bitsandbytes' dequantize gives. Also N = 2..8 on gfx942/gfx950 when N x M x K is
large (`_linear.small_n_splitk`): there the lane-split kernels' per-token VALU work outruns
the split-K kernel's reduction.

Both are bitwise reproducible across calls, schedules and CU counts.

Crossover (``fused=None``): the fused kernels for N = 1..64 on every arch, the route above. The
report's rows at N = 16 and 64 (benchmarks/RESULTS.md, `matmul_4bit` against its variant
`matmul_4bit:dequantize`) put the route's predicted time far above the fused kernel's on all
five archs: it writes and reads back the 16-bit weights (4.5 bytes per weight moved against
0.5), which the matrix work saved by skipping the decode never repays at N <= 64.

The fused kernels need K to be a multiple of the blocksize (as bitsandbytes' own fused kernels
do). Other K, and N = 65..128, take the route: the ``dequantize_4bit_<f16|bf16>`` kernel writes
W as x's 16-bit dtype (``T(code[q] * absmax)``, the fp32 product rounded once, as bitsandbytes'
dequantize) into a pooled ``[M, ceil(K / 8) * 8]`` buffer (scratch slot
``matmul_4bit.weights``), then `hipskinny.skinny_gemm`'s kernel for N multiplies it: one bound
call, two launches, nothing allocated per call. On GPU tensors the route at N > 8 needs K % 8 ==
0 (skinny_gemm's split-K rule). N > 128: torch tensors on a ROCm GPU dequantize the same way
into a tensor and take ``torch.nn.functional.linear``; anything else is an error.

GPU tensors need unit strides along K, 16-byte aligned x and packed weights and x rows a
multiple of 16 bytes apart; the state's arrays on the weights' device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd, dtypes, operands, registry
from ..devices.base import Device
from ..errors import InputTypeError, InputValueError
from ..formats import bnb
from ..launch import Launch, make_launch
from ..operands import DeviceCall, HostCall, Operands
from ..torch_ops import declare
from . import Exports
from . import _linear as lin
from . import _skinny as sk
from ._common import DTYPE_TAG
from ._quantized import CHUNK as CHUNK
from ._quantized import FUSED_MAX_N, QuantizedLinear
from ._quantized import MAX_N as MAX_N

FAMILY = "matmul_4bit"
NAMES = ("x", "w", "absmax", "absmax2", "code2", "offset", "code", "bias", "out")
ROUTE_SLOT = "matmul_4bit.weights"     # the route's dequantized 16-bit weights
_F32 = np.dtype(np.float32)
_OP = QuantizedLinear(FAMILY, NAMES, NAMES[1:7], "",
                      "x and the packed weights must start at 16-byte aligned addresses")
_calls = operands.CallCache()


def matmul_4bit(x: Any, packed: Any, state: Any, bias: Any = None, *, out: Any = None, fused: bool | None = None
                ) -> Any:
    """``x @ W.T + bias`` with W the bitsandbytes 4-bit weight ``(packed, state)`` (see the module
    docstring). ``state``: a `hipskinny.bnb.QuantState`, a bitsandbytes QuantState or anything
    `hipskinny.bnb.as_state` takes; x ``[..., K]`` fp16/bf16; bias ``[M]``, ``[1, M]`` or
    ``[N, M]`` in x's dtype. numpy, torch or DLPack operands, all on the host or all on one GPU.
    ``fused``: None (default) picks by the crossover rule; False takes the dequantize route;
    True raises an error where the fused kernels do not apply. Differentiable w.r.t. x and bias on
    torch tensors (`hipskinny.autograd`; the weight and its state frozen; ``fused`` then ignored)."""
    # hipskinny's own state as it is (its arrays' layouts are in the call signature and checked
    # when a call is bound); anything else through as_state, which checks it whole.
    st = state if type(state) is bnb.QuantState else bnb.as_state(state)
    if x.__class__ is not np.ndarray and autograd.wanted(x, packed, bias):
        return _grad_through(x, packed, st, bias, out)
    s2 = st.state2
    objs = (x, packed, st.absmax, None if s2 is None else s2.absmax, None if s2 is None else s2.code,
            st.offset if s2 is not None else None, st.code, bias, out)
    options = (tuple(int(d) for d in st.shape), int(st.blocksize), s2 is not None, fused)
    key, addresses = operands.signature(NAMES, objs, options)
    call = _calls.get(key)
    if call is None:
        call = _calls.add(key, _bind(operands.gather("matmul_4bit", NAMES, objs), st, fused))
    return call(objs, addresses)


def fusible(n: int, k: int, blocksize: int) -> bool:
    """Whether the fused kernels take N tokens at this K and blocksize (the crossover rule)."""
    return 1 <= n <= FUSED_MAX_N and k % blocksize == 0


def _bind(ops: Operands, st: bnb.QuantState, fused: bool | None) -> Any:
    xv = ops["x"]
    assert xv is not None
    n, m, k, log2_bs = _check(ops, st)
    device, tag = ops.device, DTYPE_TAG[xv.dtype]
    flags = _flags(device, st)
    return _OP.bind(
        ops, n, m, k, fusible=fusible(n, k, 1 << log2_bs), fused=fused,
        fused_rule=f"K a multiple of the blocksize; got N={n}, K={k}, blocksize {1 << log2_bs}",
        route=lambda: _route(ops, n, m, k, log2_bs, flags),
        launch=lambda x_stride, b_stride: _OP.launch(device, tag, n, m, k, x_stride, b_stride,
                                                     {"log2_bs": log2_bs, "flags": flags},
                                                     {"log2_bs": log2_bs, "flags": flags}),
        staged=lambda: _OP.staged(ops, n, m, k, k))


def _flags(device: Device, st: bnb.QuantState) -> int:
    """The kernels' ``flags`` for this state (the bit as kernels/matmul_4bit.hip declares it)."""
    return registry.launch_flags(device.arch.name, FAMILY)["nested"] if st.state2 is not None else 0


def _check(ops: Operands, st: bnb.QuantState) -> tuple[int, int, int, int]:
    """Shapes and dtypes of x, the weight and its state; returns N, M, K, log2(blocksize)."""
    xv = ops["x"]
    assert xv is not None
    if xv.dtype not in DTYPE_TAG:
        raise InputTypeError(f"matmul_4bit: x has dtype {xv.dtype}; supported: float16, bfloat16 (cast fp32 "
                             "activations, or use hipskinny.bnb.dequantize_4bit)")
    m, k, log2_bs = _check_weight(ops, st, "matmul_4bit")
    n = lin.tokens("matmul_4bit", xv, m, k)
    lin.check_bias("matmul_4bit", ops["bias"], n, m, xv.dtype)
    return n, m, k, log2_bs


def _check_weight(ops: Operands, st: bnb.QuantState, op: str) -> tuple[int, int, int]:
    """The packed weight and its state's arrays against the state's shape; returns M, K, log2(blocksize)."""
    wv = ops["w"]
    assert wv is not None
    shape = tuple(int(d) for d in st.shape)
    if len(shape) != 2:
        raise InputValueError(f"{op}: the state's shape must be the 2-D weight [M, K]; got {shape}")
    m, k = shape
    if wv.dtype != np.dtype(np.uint8) or wv.numel != (m * k + 1) // 2:
        raise InputValueError(f"{op}: packed must hold (M*K+1)//2 = {(m * k + 1) // 2} uint8 bytes for "
                              f"the state's shape {shape}; got {wv.dtype} of shape {wv.shape}")
    bs = int(st.blocksize)
    if bs not in bnb.BLOCKSIZES:
        raise InputValueError(f"{op}: blocksize must be one of {bnb.BLOCKSIZES}; got {bs}")
    blocks = -(-m * k // bs)
    nested = st.state2 is not None
    av = ops["absmax"]
    assert av is not None
    want = np.dtype(np.uint8) if nested else _F32
    if av.dtype != want or av.numel != blocks:
        raise InputValueError(f"{op}: absmax must be {want} [{blocks}] ({'nested' if nested else 'plain'}, "
                              f"blocksize {bs}); got {av.dtype} of shape {av.shape}")
    cv = ops["code"]
    if cv is None or cv.dtype != _F32 or cv.numel != 16:
        raise InputValueError(f"{op}: the state's code must be the 16-entry float32 codebook")
    if nested:
        a2, c2, off = ops["absmax2"], ops["code2"], ops["offset"]
        if a2 is None or a2.dtype != _F32 or a2.numel != -(-blocks // 256):
            raise InputValueError(f"{op}: nested state2.absmax must be float32 [{-(-blocks // 256)}]")
        if int(st.state2.blocksize) != 256:
            raise InputValueError(f"{op}: nested absmax must use blocksize 256 (bitsandbytes' fused "
                                  f"kernels need the same); got {st.state2.blocksize}")
        if c2 is None or c2.dtype != _F32 or c2.numel != 256:
            raise InputValueError(f"{op}: nested state2.code must be the 256-entry float32 map")
        if off is None or off.dtype != _F32 or off.numel != 1:
            raise InputValueError(f"{op}: a nested state needs a float32 scalar offset")
    if m * k >= 2**31:
        raise InputValueError(f"{op}: M*K must be below 2**31; got {m * k}")
    return m, k, bs.bit_length() - 1


def plan_info(device: Device, x_dtype: Any, n: int, m: int, k: int) -> dict[str, Any]:
    """The configuration a fused call of this shape gets on ``device`` (tests and benchmarks)."""
    return _OP.plan_info(device, x_dtype, n, m, k)


def _route(ops: Operands, n: int, m: int, k: int, log2_bs: int, flags: int) -> Any:
    """Shapes the fused kernels do not take: the dequantize kernel writes W as x's 16-bit dtype
    (``T(code[q] * absmax)``, one rounding, as bitsandbytes' dequantize) into a pooled
    ``[M, pitch]`` buffer for `hipskinny.skinny_gemm`'s kernel (`_skinny.dequantize_route`)."""
    xv = ops["x"]
    assert xv is not None
    device, tag, pitch = ops.device, DTYPE_TAG[xv.dtype], -(-k // 8) * 8
    return sk.dequantize_route(
        ops, "matmul_4bit", NAMES, n, m, k, pitch,
        lambda pointers, out: _dequantize_launch(device, tag, m, k, pitch, log2_bs, flags, pointers, out),
        lambda: _OP.staged(ops, n, m, k, pitch), slot=ROUTE_SLOT, out_slot="matmul_4bit.y",
        k_rule="a multiple of the blocksize (the fused kernels)", align_message=_OP.align_message)


def _dequantize_launch(device: Device, tag: str, m: int, k: int, pitch: int, log2_bs: int, flags: int,
                       pointers: tuple[str, ...], out: str = sk.DEQUANTIZED) -> Launch:
    """The dequantize kernel reading the state's operands and writing ``[M, pitch]`` 16-bit weights
    to the pointer named ``out`` (``pointers``: the call's)."""
    plan = _OP.dequantize_plan(device, f"dequantize_4bit_{tag}", m, m * pitch // 8)
    return make_launch(device, plan, pointers, **{name: name for name in NAMES[1:7]}, out=out, M=m, K=k,
                           pitch=pitch, log2_bs=log2_bs, flags=flags)


_dequantize_calls = operands.CallCache()


def dequantize(packed: Any, state: Any, dtype: Any = None, *, out: Any = None) -> Any:
    """The weight ``[M, K]`` as ``dtype`` (float16 or bfloat16; default: the state's dtype) on the
    kernel that the route uses: ``T(code[q] * absmax)``, the fp32 product rounded once, nested
    absmax decoded in the kernel -- bit for bit what bitsandbytes' dequantize gives, and
    `hipskinny.bnb.dequantize_4bit` (the host reference, any K and dtype). K must be a multiple of
    8 (the kernel stores 8 weights at a time). GPU tensors: the state's arrays and ``out``
    (contiguous, 16-byte aligned, like the packed bytes) on one device."""
    st = state if type(state) is bnb.QuantState else bnb.as_state(state)
    s2 = st.state2
    want = dtypes.read(st.dtype if dtype is None else dtype, "dtype", dtypes.HALVES)
    objs = (None, packed, st.absmax, None if s2 is None else s2.absmax, None if s2 is None else s2.code,
            st.offset if s2 is not None else None, st.code, None, out)
    key, addresses = operands.signature(NAMES, objs, (tuple(int(d) for d in st.shape), int(st.blocksize),
                                                      s2 is not None, want))
    call = _dequantize_calls.get(key)
    if call is None:
        call = _dequantize_calls.add(key, _bind_dequantize(operands.gather("dequantize", NAMES, objs), st, want))
    return call(objs, addresses)


def _bind_dequantize(ops: Operands, st: bnb.QuantState, dtype: np.dtype) -> Any:
    m, k, log2_bs = _check_weight(ops, st, "dequantize")
    if k % 8:
        raise InputValueError(f"dequantize: K must be a multiple of 8 (the kernel stores 8 weights at a time); "
                              f"got K={k} (hipskinny.bnb.dequantize_4bit takes any K)")
    operands.check_out(ops, (m, k), dtype)
    if m == 0:
        return operands.nothing(ops, (m, k), dtype, "dequantize.w")
    launch = _dequantize_launch(ops.device, DTYPE_TAG[dtype], m, k, k, log2_bs, _flags(ops.device, st), NAMES, "out")
    if ops.on_host:
        return HostCall(ops, [launch], _OP.staged(ops, 0, m, k, k), out_shape=(m, k), out_dtype=dtype,
                        out_slot="dequantize.w")
    operands.require_contiguous(ops, NAMES[1:7])
    return DeviceCall(ops, [launch], out_shape=(m, k), out_dtype=dtype, aligned=("w", "out"),
                      align_message="the packed weights and out must start at 16-byte aligned addresses")


def _torch_matmul_4bit(x: Any, packed: Any, absmax: Any, code: Any, blocksize: int, shape: Any, bias: Any = None,
                       absmax2: Any = None, code2: Any = None, offset: Any = None, *, out: Any = None) -> Any:
    """The torch op's form: the state's tensors as arguments (nested: absmax2, code2 and offset)."""
    return matmul_4bit(x, packed, _torch_state(x, absmax, code, blocksize, shape, absmax2, code2, offset), bias,
                       out=out)


def _torch_state(x: Any, absmax: Any, code: Any, blocksize: int, shape: Any, absmax2: Any, code2: Any,
                 offset: Any) -> bnb.QuantState:
    state2 = None if absmax2 is None else bnb.QuantState(absmax2, None, code2, 256, None, None)
    return bnb.QuantState(absmax, tuple(shape), code, blocksize, None, x.dtype, offset, state2)


def _grad_through(x: Any, packed: Any, st: bnb.QuantState, bias: Any, out: Any) -> Any:
    """`matmul_4bit` as its torch op, for autograd."""
    s2 = st.state2
    return autograd.through("matmul_4bit", out, x, packed, st.absmax, st.code, int(st.blocksize),
                               [int(d) for d in st.shape], bias, None if s2 is None else s2.absmax,
                               None if s2 is None else s2.code, None if s2 is None else st.offset)


def _torch_check(x: Any, packed: Any, absmax: Any, code: Any, blocksize: int, shape: Any, bias: Any = None,
                 absmax2: Any = None, code2: Any = None, offset: Any = None, *, out: Any = None) -> None:
    """The op's bind-time rules on fake tensors (`hipskinny.torch_ops.validate`)."""
    from ..torch_ops import fake_operands

    st = _torch_state(x, absmax, code, blocksize, shape, absmax2, code2, offset)
    objs = (x, packed, absmax, absmax2, code2, offset if absmax2 is not None else None, code, bias, out)
    _bind(fake_operands("matmul_4bit", NAMES, objs), st, None)


def _grad_dense(named: dict[str, Any], ints: list[int], x_dtype: Any) -> Any:
    """The weight in x's dtype for backward: the dequantize kernel (K % 8 == 0), else bnb's host dequantize.
    ``ints``: blocksize, M, K."""
    blocksize, shape = ints[0], ints[1:3]
    st = _torch_state(_Typed(x_dtype), named["absmax"], named["code"], blocksize, shape, named["absmax2"],
                      named["code2"], named["offset"])
    if int(shape[1]) % 8 == 0:
        return dequantize(named["packed"], st, x_dtype)
    quant_type = "nf4" if np.array_equal(named["code"].detach().cpu().numpy(), bnb.NF4) else "fp4"
    return bnb.dequantize_4bit(named["packed"], bnb.QuantState(*(getattr(st, f) for f in (
        "absmax", "shape", "code", "blocksize")), quant_type, x_dtype, st.offset, st.state2))


class _Typed:
    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype


# torch.ops.hipskinny.matmul_4bit / matmul_4bit_out (registered by hipskinny.torch_ops).
TORCH_OPS = declare("matmul_4bit", "Tensor x, Tensor packed, Tensor absmax, Tensor code, int blocksize, int[] shape, "
                    "Tensor? bias=None, Tensor? absmax2=None, Tensor? code2=None, Tensor? offset=None",
                    _torch_matmul_4bit, lambda x, packed, absmax, code, blocksize, shape, *_: (*x[:-1], shape[0]),
                    check=_torch_check,
                    autograd=autograd.linear(
                        "matmul_4bit", 6, lambda a: dict(zip(("packed", "absmax", "code"), a[1:4], strict=True))
                        | dict(zip(("absmax2", "code2", "offset"), a[7:10], strict=True)), _grad_dense))
EXPORTS = Exports(TORCH_OPS, ("matmul_4bit", "matmul_4bit_splitk"))


def matmul_4bit_reference(x: Any, packed: Any, state: Any, bias: Any = None) -> np.ndarray:
    """The exact semantics in float64: ``x @ dequantize_exact(packed, state).T + bias`` before any
    rounding (shape ``[..., M]``)."""
    return lin.linear_reference(x, dequantize_exact(packed, bnb.as_state(state)), bias)


def dequantize_exact(packed: Any, state: Any) -> np.ndarray:
    """The weight ``[M, K]`` in float64 from the exact codes: ``code[q] * absmax``, a nested absmax
    ``code2[q2] * absmax2 + offset`` also in float64 (the kernel rounds that once to fp32)."""
    st = bnb.as_state(state)
    m, k = (int(d) for d in st.shape)
    raw = np.asarray(packed).reshape(-1).view(np.uint8)
    codes = np.empty(raw.size * 2, np.uint8)
    codes[0::2], codes[1::2] = raw >> 4, raw & 15
    if st.state2 is None:
        absmax = np.asarray(st.absmax, np.float64)
    else:
        q = np.asarray(st.absmax).astype(np.int64)
        a2 = np.asarray(st.state2.absmax, np.float64)[np.arange(q.size) // 256]
        absmax = np.asarray(st.state2.code, np.float64)[q] * a2 + float(np.asarray(st.offset, np.float64))
    flat = np.asarray(st.code, np.float64)[codes[: m * k]] * np.repeat(absmax, int(st.blocksize))[: m * k]
    return flat.reshape(m, k)
