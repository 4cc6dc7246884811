"""FP8 (e4m3) quantization helpers: quantize, dequantize, decode and FNUZ <-> OCP conversion.

Reference quality, no GPU: everything is computed with numpy in float64 (in slices of about a
million elements, so large weights need little memory), and numpy and torch inputs give the same
bytes. torch is never imported here; torch tensors (any device) are copied to the host, processed,
and returned as torch tensors on their own device.

Two flavours of e4m3 exist, and checkpoints come in both:

* ``"ocp"``  = e4m3fn (``ml_dtypes.float8_e4m3fn``, ``torch.float8_e4m3fn``; gfx950, gfx12):
  bias 7, max 448, NaN 0x7F/0xFF, -0 = 0x80, no inf.
* ``"fnuz"`` = e4m3fnuz (``ml_dtypes.float8_e4m3fnuz``, ``torch.float8_e4m3fnuz``; gfx942):
  bias 8, max 240, NaN only 0x80, no -0, no inf.

A byte ``b`` that is finite in both means half as much in FNUZ: ``fnuz(b) == ocp(b) / 2``.

Scale granularities -- the region sharing one scale, and the scale's shape
(``G = ceil(K/128)``, ``B = ceil(M/128)``):

* ``"tensor"``:  everything, any shape; scale ``()``.
* ``"channel"``: a row of a 2-D weight ``[M, K]``; scale ``[M]``.
* ``"token"``:   a row of activations ``[..., K]`` (``N`` rows); scale ``[N]``.
* ``"group"``:   128 consecutive columns of a row of ``[..., K]``; scale ``[N, G]``.
* ``"block"``:   a 128x128 tile of a 2-D weight ``[M, K]``; scale ``[B, G]``.

Activations ``[..., K]`` are flattened to ``[N, K]`` as ``F.linear`` does, so their scales are
the ``[N]`` / ``[N, G]`` that ``hipskinny.fp8_linear`` takes.

Quantization: ``scale = amax / FMAX`` in float32, ``amax`` being the largest *finite* magnitude
of the region (NaN and +-inf are ignored, so one bad element does not poison its neighbours); a
region whose amax is 0 (all zeros, or nothing finite) gets scale 1.0, and the scale is clamped to
the positive float32 range. Each element is ``a / scale`` computed in float64 (correctly rounded
to fp8 from the exact quotient for float32 and narrower inputs), saturated to +-FMAX (overflow
and +-inf never give NaN) and rounded to nearest-even into fp8; NaN stays NaN (OCP keeps its
sign: 0x7F or 0xFF).

Dequantization: the exact fp8 value times the scale, rounded once to float32 (exactly what an
fp32 multiply gives for float32 scales). NaN or 0 scales propagate (NaN, or 0/NaN products).
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import InputTypeError, InputValueError
from ..tensors import describe as _describe
from ..tensors import is_torch as _is_torch
from ..tensors import torch_module as _torch

__all__ = [
    "FLAVORS",
    "FMAX",
    "GRANULARITIES",
    "GROUP",
    "convert",
    "decode",
    "dequantize",
    "flavor_of",
    "granularity_of",
    "quantize",
]

FLAVORS = ("ocp", "fnuz")
FMAX = {"ocp": 448.0, "fnuz": 240.0}
GROUP = 128
GRANULARITIES = ("tensor", "channel", "token", "group", "block")

_NP_DTYPE = {"ocp": np.dtype(ml_dtypes.float8_e4m3fn), "fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz)}
_TORCH_DTYPE_NAME = {"ocp": "float8_e4m3fn", "fnuz": "float8_e4m3fnuz"}
_BIAS = {"ocp": 7, "fnuz": 8}
_FLOAT_NP = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64))
_FLOAT_TORCH = ("float16", "bfloat16", "float32", "float64")
_F32_TINY = float(np.finfo(np.float32).smallest_subnormal)
_F32_MAX = float(np.finfo(np.float32).max)
_ROW_NAME = {"w": "channel", "x": "token", None: "channel"}
_CHUNK = 1 << 20    # elements per slice of rows


def _decode_table(flavor: str) -> np.ndarray:
    """Every byte's value from the bit fields (sign, 4-bit exponent, 3-bit mantissa), not from
    ml_dtypes, so that the tests can hold it against ml_dtypes and torch."""
    b = np.arange(256)
    e, m = (b >> 3) & 15, b & 7
    emin = 1 - _BIAS[flavor]
    mag = np.where(e == 0, m * 2.0 ** (emin - 3), (8 + m) * np.exp2(e - _BIAS[flavor] - 3))
    if flavor == "ocp":
        mag[(b & 0x7F) == 0x7F] = np.nan        # 0x7F NaN, 0xFF -NaN
    v = np.where(b & 0x80, -mag, mag)
    if flavor == "fnuz":
        v[0x80] = np.nan                        # FNUZ's one NaN has no sign
    v.flags.writeable = False
    return v


_TABLE = {f: _decode_table(f) for f in FLAVORS}


# ----------------------------------------------------------------------------------------------
# kinds: numpy or torch, without importing torch


def _torch_dtype(torch: Any, flavor: str) -> Any:
    dt = getattr(torch, _TORCH_DTYPE_NAME[flavor], None)
    if dt is None:
        raise InputTypeError(f"this torch ({torch.__version__}) has no torch.{_TORCH_DTYPE_NAME[flavor]}")
    return dt


def check_flavor(flavor: Any, what: str = "flavor") -> str:
    if flavor not in FLAVORS:
        raise InputValueError(f"unknown {what} {flavor!r}: expected 'ocp' (e4m3fn) or 'fnuz' (e4m3fnuz)")
    return flavor


def _check_granularity(granularity: Any) -> str:
    if granularity not in GRANULARITIES:
        raise InputValueError(f"unknown granularity {granularity!r}: expected one of "
                              + ", ".join(repr(g) for g in GRANULARITIES))
    return granularity


def flavor_of(a: Any) -> str | None:
    """``"ocp"`` or ``"fnuz"`` for an e4m3fn / e4m3fnuz numpy array or torch tensor (or their
    dtype), None for anything else (uint8 bytes included: they do not say their flavour)."""
    dt = getattr(a, "dtype", a)
    if isinstance(dt, type) and issubclass(dt, np.generic):
        dt = np.dtype(dt)
    if isinstance(dt, np.dtype):
        return next((f for f, d in _NP_DTYPE.items() if dt == d), None)
    torch = _torch()
    if torch is not None and isinstance(dt, torch.dtype):
        return next((f for f, n in _TORCH_DTYPE_NAME.items() if dt == getattr(torch, n, None)), None)
    return None


def _fp8_bytes(a8: Any, flavor: str | None) -> tuple[str, np.ndarray]:
    """The flavour and a host uint8 copy-or-view of ``a8`` (fp8 dtype, or uint8 with ``flavor``)."""
    if flavor is not None:
        check_flavor(flavor)
    own = flavor_of(a8)
    if own is not None and flavor is not None and flavor != own:
        raise InputValueError(f"a8 is {_NP_DTYPE[own].name} ({own!r}) but flavor={flavor!r} was given; "
                              "hipskinny.fp8.convert(a8, scale, to=...) changes the flavour")
    if _is_torch(a8):
        torch = _torch()
        if own is None and a8.dtype != torch.uint8:
            raise InputTypeError("a8 must be a float8_e4m3fn/float8_e4m3fnuz tensor, or uint8 with flavor=; "
                                 f"got {a8.dtype}")
        raw = a8.detach().cpu().contiguous().view(torch.uint8).numpy()
    elif isinstance(a8, (np.ndarray, np.generic)):
        if own is None and a8.dtype != np.uint8:
            raise InputTypeError("a8 must be a float8_e4m3fn/float8_e4m3fnuz array, or uint8 with flavor=; "
                                 f"got {a8.dtype}")
        raw = np.asarray(a8).view(np.uint8)
    else:
        raise InputTypeError("a8 must be a numpy array or torch tensor of an fp8 dtype (or uint8 with flavor=); "
                             f"got {_describe(a8)}")
    if own is not None:
        return own, raw
    if flavor is None:
        raise InputValueError("a8 holds uint8 bytes: say which flavour they are with flavor='ocp' or 'fnuz'")
    return flavor, raw


def _host_float(a: Any) -> np.ndarray:
    """``a`` as a host numpy array of a float dtype holding its values exactly (no copy if it is one)."""
    if _is_torch(a):
        torch = _torch()
        if a.dtype not in tuple(getattr(torch, n) for n in _FLOAT_TORCH):
            raise InputTypeError(f"quantize takes float16, bfloat16, float32 or float64 tensors; got {a.dtype}")
        wide = torch.float64 if a.dtype == torch.float64 else torch.float32
        return a.detach().to(device="cpu", dtype=wide).numpy()
    if isinstance(a, (np.ndarray, np.generic)):
        if a.dtype not in _FLOAT_NP:
            raise InputTypeError(f"quantize takes float16, bfloat16, float32 or float64 arrays; got {a.dtype}")
        return np.asarray(a)
    raise InputTypeError("quantize takes a numpy array or torch tensor (float16, bfloat16, float32 or float64); "
                         f"got {_describe(a)}")


def _scale_f64(scale: Any) -> np.ndarray:
    """A scale (array, tensor or Python number) as float64 numpy."""
    if _is_torch(scale):
        if not scale.is_floating_point():
            raise InputTypeError(f"scale must be a float tensor; got {scale.dtype}")
        return scale.detach().to(device="cpu", dtype=_torch().float64).numpy()
    if isinstance(scale, (np.ndarray, np.generic)):
        if scale.dtype not in _FLOAT_NP:
            raise InputTypeError(f"scale must be a float16, bfloat16, float32 or float64 array; got {scale.dtype}")
        return np.asarray(scale).astype(np.float64)
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return np.asarray(float(scale))
    raise InputTypeError(f"scale must be a numpy array, torch tensor or Python number; got {_describe(scale)}")


def _rescale(scale: Any, factor: np.ndarray) -> Any:
    """``scale * factor`` (powers of two: exact) in the scale's own kind and dtype."""
    if _is_torch(scale):
        return scale * _torch().from_numpy(factor).to(device=scale.device, dtype=scale.dtype)
    if isinstance(scale, (np.ndarray, np.generic)):
        out = np.asarray(np.asarray(scale) * factor.astype(scale.dtype))   # 0-d stays 0-d
        return out[()] if isinstance(scale, np.generic) else out
    return float(scale) * float(factor)


def _fp8_like(like: Any, raw: np.ndarray, flavor: str) -> Any:
    """Bytes ``raw`` in ``like``'s kind: the flavour's fp8 dtype, or uint8 if ``like`` was uint8."""
    keep_u8 = flavor_of(like) is None
    if _is_torch(like):
        torch = _torch()
        t = torch.from_numpy(np.ascontiguousarray(raw))
        return (t if keep_u8 else t.view(_torch_dtype(torch, flavor))).to(like.device)
    return raw if keep_u8 else raw.view(_NP_DTYPE[flavor])


# ----------------------------------------------------------------------------------------------
# regions


def _rows_cols(shape: tuple[int, ...], granularity: str) -> tuple[int, int]:
    """``shape`` seen as ``[R, K]`` by ``granularity`` (weights must be 2-D, activations ``[..., K]``)."""
    if granularity in ("channel", "block") and len(shape) != 2:
        raise InputValueError(f"granularity {granularity!r} needs a 2-D weight [M, K]; got shape {shape}")
    if granularity in ("token", "group") and len(shape) < 1:
        raise InputValueError(f"granularity {granularity!r} needs activations [..., K]; got shape {shape}")
    if not shape:
        return 1, 1
    return math.prod(shape[:-1]), shape[-1]


def _scale_shape(granularity: str, rows: int, cols: int) -> tuple[int, ...]:
    g, b = -(-cols // GROUP), -(-rows // GROUP)
    return {"tensor": (), "channel": (rows,), "token": (rows,), "group": (rows, g), "block": (b, g)}[granularity]


def _region_max(x: np.ndarray, granularity: str, rows: int, cols: int) -> np.ndarray:
    """Per-region maximum of a non-negative array, in the granularity's scale shape (0 if empty)."""
    if granularity == "tensor":
        return np.asarray(np.max(x, initial=0.0))
    x = x.reshape(rows, cols)
    if granularity in ("channel", "token"):
        return x.max(axis=1, initial=0.0)
    g, b = -(-cols // GROUP), -(-rows // GROUP)
    r = b * GROUP if granularity == "block" else rows
    padded = np.zeros((r, g * GROUP), x.dtype)
    padded[:rows, :cols] = x
    if granularity == "group":
        return padded.reshape(rows, g, GROUP).max(axis=2, initial=0.0)
    return padded.reshape(b, GROUP, g, GROUP).max(axis=(1, 3), initial=0.0)


def _expand(s: np.ndarray, granularity: str, rows: int, cols: int) -> np.ndarray:
    """The per-region array ``s`` broadcast to every element of ``[R, K]`` (or a 0-d for tensor)."""
    if granularity == "tensor":
        return s.reshape(())
    if granularity in ("channel", "token"):
        return s[:, None]
    if granularity == "group":
        return np.repeat(s, GROUP, axis=1)[:, :cols]
    return np.repeat(np.repeat(s, GROUP, axis=0), GROUP, axis=1)[:rows, :cols]


def _slices(rows: int, cols: int, granularity: str) -> Any:
    """Row slices ``(r0, r1, scale_rows)`` of about `_CHUNK` elements, whole 128-row blocks each,
    with the part of the scale array (its leading axis) that covers them."""
    step = max(GROUP, _CHUNK // max(cols, 1) // GROUP * GROUP)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        if granularity == "tensor":
            yield r0, r1, ...
        elif granularity == "block":
            yield r0, r1, slice(r0 // GROUP, -(-r1 // GROUP))
        else:
            yield r0, r1, slice(r0, r1)


def granularity_of(rows: int, cols: int, scale_shape: Any, role: str | None = None, *, name: str = "scale") -> str:
    """The granularity a scale of ``scale_shape`` has for a ``[rows, cols]`` operand, or an
    InputValueError listing the shapes that would be accepted.

    ``role="w"`` (weight ``[M, K]``) accepts tensor, ``"channel"`` and ``"block"``; ``role="x"``
    (activations ``[N, K]``) accepts tensor, ``"token"`` and ``"group"``; ``None`` accepts all and
    calls a per-row scale ``"channel"``. Shapes are tried in this order: ``()`` and ``(1,)`` are
    ``"tensor"``; ``(rows,)`` per row; ``(rows, ceil(cols/128))`` ``"group"``;
    ``(ceil(rows/128), ceil(cols/128))`` ``"block"``. Shapes of two granularities coincide only
    when those granularities coincide for the operand (one row: per-row = per-tensor, group =
    block), so the order decides a name, never a value; ``role`` picks the name the op expects.
    """
    if role not in _ROW_NAME:
        raise InputValueError(f"unknown role {role!r}: expected 'w' (weight), 'x' (activations) or None")
    try:
        ss = tuple(int(d) for d in scale_shape)
    except TypeError:
        raise InputTypeError(f"{name} shape must be a sequence of ints; got {scale_shape!r}") from None
    rows, cols = int(rows), int(cols)
    g, b = -(-cols // GROUP), -(-rows // GROUP)
    row_name = _ROW_NAME[role]
    accepted = [((), "tensor"), ((1,), "tensor"), ((rows,), row_name)]
    if role != "w":
        accepted.append(((rows, g), "group"))
    if role != "x":
        accepted.append(((b, g), "block"))
    for shape, gran in accepted:
        if ss == shape:
            return gran
    operand = {"w": "weight", "x": "activation", None: "operand"}[role]
    listed = ["() or (1,) per tensor", f"{(rows,)} per {row_name}"]
    if role != "w":
        listed.append(f"{(rows, g)} per row and group of {GROUP} columns")
    if role != "x":
        listed.append(f"{(b, g)} per {GROUP}x{GROUP} block")
    hint = f" (a per-row scale stored as {(rows, 1)} must be reshaped to {(rows,)})" if ss == (rows, 1) else ""
    raise InputValueError(f"{name} of shape {ss} matches no scale granularity of a [{rows}, {cols}] {operand}; "
                          f"accepted: {', '.join(listed)}{hint}")


def _resolve(shape: tuple[int, ...], scale_shape: tuple[int, ...], granularity: str | None) -> tuple[str, int, int]:
    """The granularity (given or inferred) and the ``[R, K]`` view for an fp8 array and its scale."""
    if granularity is None:
        if len(shape) == 2:
            gran = granularity_of(shape[0], shape[1], scale_shape, None)
        elif not shape:
            if scale_shape not in ((), (1,)):
                raise InputValueError(f"scale of shape {scale_shape} does not fit a 0-d a8: accepted () or (1,)")
            gran = "tensor"
        else:   # [..., K] activations seen as [N, K]
            gran = granularity_of(math.prod(shape[:-1]), shape[-1], scale_shape, "x")
        return (gran, *_rows_cols(shape, gran))
    gran = _check_granularity(granularity)
    rows, cols = _rows_cols(shape, gran)
    want = _scale_shape(gran, rows, cols)
    if scale_shape != want and not (gran == "tensor" and scale_shape == (1,)):
        raise InputValueError(f"granularity {gran!r} needs a scale of shape {want} for a8 of shape {shape}; "
                              f"got {scale_shape}")
    return gran, rows, cols


# ----------------------------------------------------------------------------------------------
# the public operations


def encode(q: np.ndarray, flavor: str) -> np.ndarray:
    """Round float64 ``q`` (already within +-FMAX, or NaN) to nearest-even fp8, as uint8 bytes.
    Done here rather than by an ml_dtypes cast, which rounds float64 through float32 (twice)."""
    _, e = np.frexp(np.abs(q))                                       # |q| in [2**(e-1), 2**e)
    quantum = np.ldexp(1.0, np.maximum(e - 1, 1 - _BIAS[flavor]) - 3)  # 3 mantissa bits; subnormal step
    r = np.round(q / quantum) * quantum                              # exact scaling, ties to even
    return np.asarray(r).astype(_NP_DTYPE[flavor]).view(np.uint8)


def decode(a8: Any, flavor: str | None = None) -> np.ndarray:
    """The exact values of fp8 ``a8`` as float64 numpy: NaN for the NaN encodings (OCP's 0xFF as -NaN),
    -0.0 for OCP's 0x80. ``a8``: an e4m3fn/e4m3fnuz numpy array or torch tensor, or uint8 bytes with
    ``flavor``; the table is built from the bit fields, so it checks ml_dtypes rather than copying it."""
    fl, raw = _fp8_bytes(a8, flavor)
    return _TABLE[fl][raw]


def quantize(a: Any, *, granularity: str, flavor: str = "ocp") -> tuple[Any, Any]:
    """``(a8, scale)`` with ``a ~= dequantize(a8, scale)``: see the module docstring for the regions,
    the scale rule and the rounding. numpy in: fp8 numpy array and float32 numpy scale; torch in:
    torch float8 tensor and float32 tensor scale on ``a``'s device."""
    fl = check_flavor(flavor)
    gran = _check_granularity(granularity)
    x = _host_float(a)
    rows, cols = _rows_cols(x.shape, gran)
    x2 = x.reshape(rows, cols)
    amax = np.zeros(_scale_shape(gran, rows, cols))
    for r0, r1, sr in _slices(rows, cols, gran):
        c = x2[r0:r1].astype(np.float64)
        part = _region_max(np.where(np.isfinite(c), np.abs(c), 0.0), gran, r1 - r0, cols)
        amax[sr] = np.maximum(amax[sr], part) if gran == "tensor" else part
    scale = np.array(np.clip(amax / FMAX[fl], _F32_TINY, _F32_MAX), np.float32)
    scale[amax == 0] = 1.0
    s64 = scale.astype(np.float64)
    raw = np.empty((rows, cols), np.uint8)
    for r0, r1, sr in _slices(rows, cols, gran):
        q = x2[r0:r1].astype(np.float64) / _expand(s64[sr], gran, r1 - r0, cols)
        raw[r0:r1] = encode(np.clip(q, -FMAX[fl], FMAX[fl]), fl)
    raw = raw.reshape(x.shape)
    if _is_torch(a):
        torch = _torch()
        a8 = torch.from_numpy(raw).view(_torch_dtype(torch, fl)).to(a.device)
        return a8, torch.from_numpy(scale).to(a.device)
    return raw.view(_NP_DTYPE[fl]), scale


def dequantize(a8: Any, scale: Any, *, granularity: str | None = None, flavor: str | None = None,
               exact: bool = False) -> Any:
    """``decode(a8) * scale`` rounded once to float32, in ``a8``'s kind (numpy, or torch on its device);
    ``exact=True``: the products in float64, not rounded (exact: an FP8 value has 4 significant bits).

    With ``granularity=None`` it is inferred from the scale's shape: a 2-D ``a8 [M, K]`` accepts
    ``()``/``(1,)`` (tensor), ``(M,)`` (per row), ``(M, ceil(K/128))`` (group) and
    ``(ceil(M/128), ceil(K/128))`` (block) -- see `granularity_of`, whose order only matters where
    two granularities mean the same thing; any other ``a8 [..., K]`` is seen as ``[N, K]``
    activations (tensor, ``(N,)`` per token, ``(N, ceil(K/128))`` group). A given granularity
    checks the scale's shape instead. ``flavor`` is needed when ``a8`` is uint8 bytes.
    """
    fl, raw = _fp8_bytes(a8, flavor)
    s = _scale_f64(scale)
    gran, rows, cols = _resolve(raw.shape, s.shape, granularity)
    if gran == "tensor":
        s = s.reshape(())
    raw2 = raw.reshape(rows, cols)
    out = np.empty((rows, cols), np.float64 if exact else np.float32)
    for r0, r1, sr in _slices(rows, cols, gran):
        out[r0:r1] = _TABLE[fl][raw2[r0:r1]] * _expand(s[sr], gran, r1 - r0, cols)
    out = out.reshape(raw.shape)
    if _is_torch(a8):
        return _torch().from_numpy(out).to(a8.device)
    return out


def convert(a8: Any, scale: Any, to: str, *, granularity: str | None = None,
            flavor: str | None = None) -> tuple[Any, Any]:
    """``(a8, scale)`` in flavour ``to`` with the same dequantized values, in the kinds that came in
    (``a8``: fp8 dtype -> the target's fp8 dtype, uint8 -> uint8; ``scale``: same kind and dtype).

    OCP -> FNUZ is exact for every byte: same bits, scale x 2, NaN 0x7F/0xFF -> 0x80, -0 0x80 -> 0x00.

    FNUZ -> OCP: same bits with the scale / 2 is exact for every byte but +-240 (0x7F/0xFF), which
    would become OCP's NaN; keeping the scale and re-encoding each value is exact but for the 16
    encodings of magnitude k * 2**-10, k odd < 16, below OCP's 2**-9 subnormal step; no power-of-two
    rescale is exact for all 256 (240 needs a factor >= 1, 2**-10 one <= 1/2). The choice is made
    per scale region (granularity given or inferred as in `dequantize`): a region holding +-240 keeps
    its scale and is re-encoded (nearest-even: those 16 values move by 2**-10 * scale, < 1e-5 of
    the region's range), every other region keeps its bits with the scale halved (exact). So data
    that came from OCP goes back bit for bit (but for the sign of NaN and zero), and an
    FNUZ-quantized region (its amax is 240) is exact up to those tiny values. FNUZ NaN 0x80 becomes
    0x7F.
    """
    to = check_flavor(to, "target flavor")
    fl, raw = _fp8_bytes(a8, flavor)
    if fl == to:
        return a8, scale
    s = _scale_f64(scale)
    gran, rows, cols = _resolve(raw.shape, s.shape, granularity)
    if to == "fnuz":
        out = raw.copy()
        out[(raw & 0x7F) == 0x7F] = 0x80
        out[raw == 0x80] = 0x00
        factor = np.full(s.shape, 2.0)
    else:
        raw2 = raw.reshape(rows, cols)
        keep = _region_max(((raw2 & 0x7F) == 0x7F).view(np.uint8), gran, rows, cols) > 0
        factor = np.where(keep, 1.0, 0.5)
        out = np.empty((rows, cols), np.uint8)
        for r0, r1, sr in _slices(rows, cols, gran):
            out[r0:r1] = encode(_TABLE["fnuz"][raw2[r0:r1]] / _expand(factor[sr], gran, r1 - r0, cols), "ocp")
        out = out.reshape(raw.shape)
        out[raw == 0x80] = 0x7F
    return _fp8_like(a8, out, to), _rescale(scale, factor.reshape(s.shape))
