"""bitsandbytes 4-bit weights (NF4 / FP4): quantize, dequantize, and read/write bitsandbytes' quant state.

Reference quality, no GPU, and no bitsandbytes import: everything is computed with numpy, in float32
exactly where bitsandbytes computes in float32, so numpy and torch inputs give the same bytes (a torch
weight's nested offset is torch's own float32 mean, which the numpy path reproduces). torch is never
imported here; torch tensors (any device) are copied to the host, processed, and returned as torch
tensors on their own device.

Format (bitsandbytes ``quantize_4bit`` / ``Params4bit``):

* The weight (float16, bfloat16 or float32, any shape) is flattened row-major and cut into blocks of
  ``blocksize`` consecutive elements (32, 64, ..., 4096; the last block may be partial; blocks may
  straddle rows). ``absmax[b]`` = max ``|w|`` of block ``b`` (float32).
* Each element is scaled to ``x = w * (1/absmax)`` (float32 reciprocal, then a float32 multiply,
  as the CUDA kernel does) and coded as bitsandbytes' CPU/default backend codes it
  (``torch.bucketize`` against ``_get_4bit_quantize_bounds``): the nearest entry of the table, judged
  at the float32 midpoints ``(a + b) / 2`` of its neighbouring entries, a value exactly on a midpoint
  going to the LOWER entry. NF4: code = the number of `NF4_THRESHOLDS` (those midpoints) that ``x``
  strictly exceeds. FP4 (midpoints mirrored about 0, `FP4_THRESHOLDS` the positive ones): sign bit 8
  if ``x < 0``; magnitude code of the number of thresholds ``|x|`` strictly exceeds if ``x >= 0``,
  reaches (``>=``) if ``x < 0`` (on a negative midpoint the lower entry is the larger magnitude).
  A negative value that rounds to zero is FP4 code 8; -0.0 itself is code 0. Code 8 is +0.0 in
  `FP4`, as in bitsandbytes' table (``QuantState.code``), so both zero codes dequantize to +0.0 here.
* Packing: flat element ``2j`` in the HIGH nibble of byte ``j``, ``2j+1`` in the LOW nibble; an odd
  count pads the last low nibble with the code of 0.0 (NF4 7, FP4 0). ``packed`` is uint8
  ``[(n+1)//2, 1]``.
* Dequantization: ``LUT[code] * absmax[i // blocksize]`` in float32, rounded once to the original
  dtype.
* ``compress_statistics=True`` ("nested"/double quantization), as ``bitsandbytes.functional.quantize_4bit``
  computes it on the CPU, byte for byte: ``offset = absmax.mean()``, torch's float32 CPU mean (its
  float32 sum in torch's order, see `_torch_cpu_mean`, then one float32 division by the count), and
  ``r = absmax - offset`` (float32) quantized in blocks of 256 against `DYNAMIC_MAP` by bitsandbytes'
  CPU library: ``x = r * (1/max|r|)`` (float32), clamped to [-1, 1], goes to the nearest of 65536
  grid points ``2i/65535 - 1`` (``i = trunc(fma((x+1)*0.5, 65535, 0.5))``, float32), and a grid point
  to its nearest entry (judged at the float32 midpoints, a tie to the lower). So a code is the nearest
  entry only to within the grid's step: of the entries near 0, closer together than 2/65535, not all
  are reachable, and 0.0 itself (code 127) is never chosen. ``absmax`` then holds the uint8 codes,
  ``state2.absmax`` the float32 max ``|r|`` per 256 blocks, and
  ``absmax[b] = code2[q[b]] * state2.absmax[b // 256] + offset`` (float32 multiply, then float32 add).

Choices where bitsandbytes' backends disagree:

* All-zero block (absmax 0): its scaled values are taken as 0, so every element gets the code of 0.0
  (NF4 7 -> bytes 0x77, FP4 0) and dequantizes to 0. bitsandbytes' CPU/default backend gives the
  same bytes (it clamps absmax to 1e-38); its CUDA kernel computes 0 * (1/0) = NaN and stores NF4
  code 0 (-1.0 * 0 = -0.0). The stored absmax is 0, as the kernel stores it; the CPU backend stores
  its 1e-38 for an all-zero partial last block. A block whose reciprocal overflows (absmax <
  1/FLT_MAX, only reachable with bfloat16 or float32 weights that small) is divided instead of
  multiplied. In the nested step an all-zero block of ``r`` is code 0, as both backends store it
  (0 * inf = NaN): it reconstructs to exactly ``offset``.
* Nested statistics follow bitsandbytes' CPU path, the reference its tests run: on a GPU,
  bitsandbytes takes the mean in the GPU's summation order and its kernel picks the nearest entry by
  binary search (a tie to the even index), so a state it made there may differ in nested codes and
  the offset's last bits. Dequantization reads the stored codes, offset and map, so either kind of
  state dequantizes bit for bit.
* 4-bit decisions: bitsandbytes' two paths disagree, and hipskinny takes the CPU/default backend's
  (above; the one its tests run, and the one here to check against), but for the sign of FP4's zero.
  Neither is the exact nearest entry: where a float32 midpoint rounded above the exact one, the value
  on it goes to the lower, farther entry. The CUDA kernel (``dQuantizeFP4`` / ``dQuantizeNF4`` in
  csrc/kernels.cu: trees of ``x > literal``, FP4 on ``|x|`` with the sign bit from ``x < 0``) decides
  at float literals instead. FP4's (`_CUDA_FP4_LITERALS`) differ from the float32 midpoints at five of
  seven: 0.00260417f lies above its midpoint (14 float32 values, nearer 1/192, that the kernel codes
  0), 0.583333f 3.6e-7 below (6 values, 5 of them nearer 0.5, that it codes 2/3), and 0.20833333f,
  0.29166667f, 0.8333333f one value below (the midpoint itself, which it codes up). NF4's decimal
  literals, rounded once to float32, are one ulp off the float32 midpoints at four thresholds
  (-0.84809643, 0.120255254, 0.501663387, 0.861478388 against -0.848096371, 0.120255247,
  0.501663446, 0.861478448 here): each exact midpoint is a tie between two float32 values, which
  the float32 ``(a + b) / 2`` rounds to even and the literal's decimal digits round their way. And
  on FP4's negative midpoints the kernel takes the smaller magnitude. GPU-made codes may differ at
  exactly those values.
* The sign of an FP4 zero follows the CUDA kernel (code 8 exactly for ``-m < x < 0``, ``m`` the first
  midpoint): the sign bit is ``x < 0``. bitsandbytes' CPU backend codes the zero bucket the other way
  round (``(0, m]`` code 8, ``(-m, 0]`` code 0): that is the order ``torch.argsort`` (unstable) gives
  the two equal +0.0 entries of its table, no rule; and bitsandbytes' dequantizers that read the
  sign bit (the CUDA kernel's ``dDequantizeFP4Tree`` and its CPU library's table, used for an even
  last dimension) turn code 8 into -0.0, so its CPU codes flip a zero's sign both ways through them
  and the kernel's keep it. Nibbles differ there, dequantized values only in the sign of a zero.
* bitsandbytes' CPU/default backend also divides (instead of multiplying by the reciprocal) in a
  partial last block, so codes there may differ where ``w / absmax`` and ``w * (1/absmax)`` differ;
  and it scales by ``1/max(absmax, 1e-38)``, so a block whose absmax is below 1e-38 (bfloat16 or
  float32 weights only) gets codes for ``w / 1e-38`` instead of ``w / absmax``.
* `DYNAMIC_MAP` is the map bitsandbytes builds with torch's CPU ``linspace``, which rounds
  ``start + step*i`` once (a fused multiply-add); a torch build rounding twice gives 42 of the 256
  entries one ulp away. A checkpoint carries its own map (``nested_quant_map``): dequantization uses
  ``state.state2.code``, so only quantization depends on it.
* torch's float32 sum depends on its SIMD width and, from 32768 blocks on, on its thread count (one
  partial sum per thread's chunk). A torch weight's offset is torch's own mean, so it matches
  bitsandbytes in the same process; for a numpy weight `_torch_cpu_mean` reads both from torch when
  torch is loaded (16 lanes for its AVX512 kernels, else 8), else assumes 8 lanes on one thread.
* Non-finite weights are rejected (InputValueError), where bitsandbytes quantizes them: its CPU
  backend's absmax is inf for a block holding an inf (NaN for one holding a NaN), and that block
  dequantizes to inf and NaN (``code * inf``; 0 * inf is NaN) or NaN throughout (in bfloat16 its CPU
  library may round such a NaN to 0.0, `_nonfinite_message`); nested, the offset (the mean absmax) is
  non-finite too and so is the whole weight. The message says so. (The CUDA kernel's absmax may skip
  a NaN, and the code it gives a NaN is meaningless.)

The state (`QuantState`) keeps bitsandbytes' attribute names and the layout a kernel reads: packed
bytes, flat float32 ``absmax`` (or uint8 codes + ``state2``), ``offset`` a 0-d float32, ``code`` the
16-entry float32 LUT. numpy in -> numpy state (``dtype`` a numpy dtype, ``shape`` a tuple); torch in
-> torch tensors on the input's device (``dtype`` a torch dtype, ``shape`` a ``torch.Size``).
`as_state` reads bitsandbytes' own ``QuantState``, a ``Params4bit`` or a checkpoint's state dict
without importing bitsandbytes; `state_dict` writes that state-dict layout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .. import dtypes
from ..errors import InputTypeError, InputValueError
from ..tensors import describe as _describe
from ..tensors import is_torch as _is_torch
from ..tensors import torch_module as _torch

__all__ = [
    "BLOCKSIZES",
    "DYNAMIC_MAP",
    "FP4",
    "FP4_THRESHOLDS",
    "NF4",
    "NF4_THRESHOLDS",
    "QUANT_TYPES",
    "QuantState",
    "absmax_fp32",
    "as_state",
    "dequantize_4bit",
    "quantize_4bit",
    "state_dict",
]

QUANT_TYPES = ("nf4", "fp4")
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
NESTED_BLOCKSIZE = 256      # bitsandbytes' double quantization; its fused kernels accept nothing else


def _frozen(values: Any) -> np.ndarray:
    a = np.array(values, np.float32)
    a.flags.writeable = False
    return a


# The normative tables (quant_specs.md 1.1); index = 4-bit code.
NF4 = _frozen([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
])
# bnb's FP4 (not OCP E2M1): sign bit 3; magnitudes {0, 0.0625, 8, 12, 4, 6, 2, 3} / 12. Code 8 is +0.0, as in
# bitsandbytes' own table (get_4bit_type writes it as the int -0), which is the QuantState.code it makes.
FP4 = _frozen(np.array([0.0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0] * 2, np.float32)
              / np.float32(12) * np.float32([1] * 9 + [-1] * 7))

# bitsandbytes' decision points (its CPU/default backend: bucketize against the float32 midpoints
# (a + b) / 2 of its sorted table), ascending. NF4: the midpoints of `NF4`. FP4: the midpoints of the
# sorted magnitudes, which the negative half mirrors.
NF4_THRESHOLDS = _frozen([
    -0.8480964004993439, -0.6106329262256622, -0.4599952697753906, -0.33967943489551544,
    -0.23460740596055984, -0.13791173323988914, -0.045525018125772476, 0.03979014977812767,
    0.1202552504837513, 0.2035212516784668, 0.2920137718319893, 0.3893125355243683,
    0.5016634166240692, 0.6427869200706482, 0.8614784181118011,
])
FP4_THRESHOLDS = _frozen((lambda m: (m[:-1] + m[1:]) / np.float32(2))(np.sort(FP4[:8])))
# magnitude code for "|x| exceeds exactly k of FP4_THRESHOLDS"
_FP4_MAG_CODE = np.array([0, 1, 6, 7, 4, 5, 2, 3], np.uint8)
# The CUDA kernel's float literals (dQuantizeFP4 / dQuantizeNF4), rounded to float32 as a compiler
# rounds a decimal literal (once, to nearest): where they differ from the thresholds above, its GPU
# path decides differently (module docstring). Documentation and tests only.
_CUDA_FP4_LITERALS = _frozen([0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333])
_LUT = {"nf4": NF4, "fp4": FP4}


def _torch_linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps, dtype=torch.float32)`` on the CPU, bit for bit: a float32
    step, then ``start + step*i`` (first half) or ``end - step*(steps-1-i)`` rounded ONCE to float32
    (torch's CPU kernel is compiled to a fused multiply-add; float64 holds the exact value: 24-bit
    step times i <= 64, plus a float32). A build rounding twice gives 1-ulp differences."""
    s, e = np.float32(start), np.float32(end)
    step = np.float64((e - s) / np.float32(steps - 1))
    i = np.arange(steps)
    lo = np.float64(s) + step * i
    hi = np.float64(e) - step * (steps - 1 - i)
    return np.where(i < steps // 2, lo, hi).astype(np.float32)


def _signed_dynamic_map() -> np.ndarray:
    """bitsandbytes' ``create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)``: for
    i = 0..6, the 2**i midpoints of ``linspace(0.1, 1, 2**i + 1)`` (float32) times ``10**(i-6)``
    (a float32 multiply), with both signs, plus 0 and 1, sorted: 256 distinct float32 values."""
    vals = [np.float32([0.0, 1.0])]
    for i in range(7):
        b = _torch_linspace_f32(0.1, 1.0, 2**i + 1)
        mids = (b[:-1] + b[1:]) / np.float32(2)
        scaled = np.float32(10.0 ** (i - 6)) * mids
        vals += [scaled, -scaled]
    return _frozen(np.sort(np.concatenate(vals)))


DYNAMIC_MAP = _signed_dynamic_map()

# bitsandbytes' CPU library codes 8-bit values through a table over a 65536-point grid: point i is the
# float32 value 2i/65535 - 1 ((2*i) / 65535.0f - 1.0f, each step rounded), and its code the number of
# float32 midpoints (a + b) * 0.5 of the map strictly below it (the nearest entry; a tie goes low).
_DYN_GRID = 65535
_DYN_TABLE = np.searchsorted(
    (DYNAMIC_MAP[:-1] + DYNAMIC_MAP[1:]) * np.float32(0.5),
    np.float32(2) * np.arange(_DYN_GRID + 1, dtype=np.float32) / np.float32(_DYN_GRID) - np.float32(1),
    side="left").astype(np.uint8)
_DYN_TABLE.flags.writeable = False

_NP_DTYPE = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
             "float32": np.dtype(np.float32)}
_CHUNK = 1 << 20    # elements per slice (a multiple of every blocksize): bounded temporaries


# ----------------------------------------------------------------------------------------------
# kinds: numpy or torch, without importing torch


def _host(x: Any) -> np.ndarray:
    """A host numpy view or copy of an array or tensor (bfloat16 tensors as ml_dtypes.bfloat16)."""
    if _is_torch(x):
        torch = _torch()
        t = x.detach().to("cpu").contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    return np.asarray(x)


def _like(a: np.ndarray, ref: Any) -> Any:
    """numpy ``a`` in ``ref``'s kind: a torch tensor on ``ref``'s device if ``ref`` is one."""
    if _is_torch(ref):
        return _torch().from_numpy(np.require(a, requirements="C")).to(ref.device)   # (0-d stays 0-d)
    return a


def _dtype_in_kind(name: str, torch_kind: bool) -> Any:
    return getattr(_torch(), name) if torch_kind else _NP_DTYPE[name]


# ----------------------------------------------------------------------------------------------
# the state


@dataclass(eq=False)
class QuantState:
    """bitsandbytes' ``QuantState`` fields (same names and order), as plain data.

    ``absmax``: float32 ``[ceil(n/blocksize)]``, or uint8 codes when nested; ``shape``: the original
    weight's shape (a Linear's ``(out, in)``); ``code``: the 16-entry float32 LUT (`NF4` or `FP4`);
    ``blocksize``; ``quant_type`` ``"nf4"``/``"fp4"``; ``dtype``: the original dtype (numpy or torch);
    ``offset``: 0-d float32 (nested only); ``state2``: a QuantState with float32 ``absmax``
    ``[ceil(nblocks/256)]``, ``code`` = `DYNAMIC_MAP`, ``blocksize`` 256, ``dtype`` float32 (nested
    only; its ``shape`` is ``(nblocks,)`` and its ``quant_type`` None).
    """

    absmax: Any
    shape: Any = None
    code: Any = None
    blocksize: int | None = None
    quant_type: str | None = None
    dtype: Any = None
    offset: Any = None
    state2: QuantState | None = None

    @property
    def nested(self) -> bool:
        return self.state2 is not None


def _shape1(n: int, torch_kind: bool) -> Any:
    """``(n,)`` as a tuple, or a ``torch.Size`` for torch states."""
    return _torch().Size([n]) if torch_kind else (n,)


# ----------------------------------------------------------------------------------------------
# arguments


def _check_blocksize(blocksize: Any, what: str = "blocksize") -> int:
    if isinstance(blocksize, (int, np.integer)) and not isinstance(blocksize, bool) and blocksize in BLOCKSIZES:
        return int(blocksize)
    raise InputValueError(f"{what} must be a power of two from 32 to 4096 ({', '.join(map(str, BLOCKSIZES))}); "
                          f"got {blocksize!r}")


def _check_quant_type(quant_type: Any) -> str:
    if quant_type not in QUANT_TYPES:
        raise InputValueError(f"quant_type must be 'nf4' or 'fp4'; got {quant_type!r}")
    return quant_type


def _host_weight(w: Any) -> tuple[np.ndarray, str]:
    """The flat float32 host copy of weight ``w`` and its dtype name."""
    if _is_torch(w):
        name = dtypes.name_of(w.dtype)
        if name is None:
            raise InputTypeError(f"quantize_4bit takes float16, bfloat16 or float32 tensors; got {w.dtype}")
        return w.detach().to(device="cpu", dtype=_torch().float32).reshape(-1).numpy(), name
    if isinstance(w, (np.ndarray, np.generic)):
        name = dtypes.name_of(w.dtype)
        if name is None:
            raise InputTypeError(f"quantize_4bit takes float16, bfloat16 or float32 arrays; got {w.dtype}")
        return np.asarray(w).astype(np.float32).reshape(-1), name
    raise InputTypeError("quantize_4bit takes a numpy array or torch tensor (float16, bfloat16 or float32); "
                         f"got {_describe(w)}")


# ----------------------------------------------------------------------------------------------
# the arithmetic


def _scaled(blocks: np.ndarray, absmax: np.ndarray) -> np.ndarray:
    """``blocks [B, bs] * (1/absmax)[:, None]`` in float32; 0 for all-zero blocks, and a division
    where the reciprocal overflows (absmax < 1/FLT_MAX)."""
    pos = absmax > 0
    with np.errstate(divide="ignore", over="ignore"):
        recip = np.divide(np.float32(1), absmax, out=np.zeros_like(absmax), where=pos)
    with np.errstate(invalid="ignore"):     # inf * 0 in the blocks divided below
        x = blocks * recip[:, None]
    huge = pos & np.isinf(recip)
    if huge.any():
        x[huge] = blocks[huge] / absmax[huge, None]
    return x


def _codes_4bit(x: np.ndarray, quant_type: str) -> np.ndarray:
    """4-bit codes of float32 ``x``: the nearest table entry judged at the float32 midpoints, a value
    on a midpoint going to the lower entry (bitsandbytes' ``bucketize``); FP4's sign bit is ``x < 0``."""
    if quant_type == "nf4":
        return np.searchsorted(NF4_THRESHOLDS, x, side="left").astype(np.uint8)   # #thresholds < x
    neg = x < 0
    ax = np.abs(x)
    # lower entry on a midpoint: the smaller magnitude for x > 0, the larger one for x < 0
    k = np.where(neg, np.searchsorted(FP4_THRESHOLDS, ax, side="right"),
                 np.searchsorted(FP4_THRESHOLDS, ax, side="left"))
    return _FP4_MAG_CODE[k] | np.where(neg, np.uint8(8), np.uint8(0))


def _dynamic_codes(x: np.ndarray) -> np.ndarray:
    """8-bit codes of float32 ``x`` against `DYNAMIC_MAP`, as bitsandbytes' CPU library picks them: x clamped
    to [-1, 1], grid point trunc(fma((x + 1) * 0.5, 65535, 0.5)) in float32 (float64 holds the fma's exact
    value, so it is rounded once, as the fma does), then `_DYN_TABLE`. NaN lands on point 0 (the float-to-int
    conversion gives 0x80000000, of which the table index keeps the low 16 bits)."""
    with np.errstate(invalid="ignore"):
        t = (np.clip(x, np.float32(-1), np.float32(1)) + np.float32(1)) * np.float32(0.5)
        u = (t.astype(np.float64) * _DYN_GRID + 0.5).astype(np.float32)
    return _DYN_TABLE[np.trunc(np.where(np.isnan(u), np.float32(0), u)).astype(np.intp)]


def _absmax_blocks(a: np.ndarray, blocksize: int) -> tuple[np.ndarray, np.ndarray]:
    """``a`` zero-padded to whole blocks ``[B, blocksize]`` (the pad is 0.0, as the kernel loads it)
    and each block's max ``|a|``."""
    nb = -(-a.size // blocksize)
    padded = np.zeros(nb * blocksize, np.float32)
    padded[: a.size] = a
    blocks = padded.reshape(nb, blocksize)
    return blocks, np.abs(blocks).max(axis=1)


def _pack(codes: np.ndarray) -> np.ndarray:
    return (codes[0::2] << 4) | codes[1::2]


def _unpack(raw: np.ndarray) -> np.ndarray:
    codes = np.empty(2 * raw.size, np.uint8)
    codes[0::2] = raw >> 4
    codes[1::2] = raw & 15
    return codes


def _quantize_dynamic(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bitsandbytes' CPU ``quantize_blockwise`` of float32 ``a`` in blocks of 256: (uint8 codes, float32 absmax
    per block). x = a * (1/absmax) in float32; where that reciprocal is inf (an all-zero block, or absmax below
    1/FLT_MAX) 0 * inf is NaN and codes 0, as bitsandbytes' zero-filled block does."""
    blocks, absmax = _absmax_blocks(a, NESTED_BLOCKSIZE)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        x = blocks * (np.float32(1) / absmax)[:, None]
    return _dynamic_codes(x).reshape(-1)[: a.size], absmax


# torch's CPU float32 sum: bitsandbytes' offset is ``absmax.mean()``, that sum then one float32 division by n
_TORCH_GRAIN = 32768        # at::internal::GRAIN_SIZE: a shorter sum, or one on a single thread, is serial


def _running_sum(v: np.ndarray) -> np.ndarray:
    """``v [..., k, L]`` summed over its k axis one float32 add at a time from 0 (zeros if k == 0)."""
    if v.shape[-2] == 0:
        return np.zeros(v.shape[:-2] + v.shape[-1:], np.float32)
    return np.add.accumulate(v, axis=-2, dtype=np.float32)[..., -1, :]


def _grouped_sums(v: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Running sums of ``v [k, L]`` over whole groups of ``g`` rows, and over the rows left over."""
    c = v.shape[0] // g
    return _running_sum(v[: c * g].reshape(c, g, v.shape[1])), _running_sum(v[c * g:])


def _cascade_sum(rows: np.ndarray) -> np.ndarray:
    """torch's ``multi_row_sum`` of ``rows [size, L]``, per column: level 0 sums runs of 2**p rows
    (p = max(4, ceil(log2 size) // 4)), each pushed into level 1; levels 1 and 2 pass their sum up every 2**p
    pushes; at the end the rows past the last run, then levels 1, 2 and 3 are added in that order."""
    size, lanes = rows.shape
    step = 1 << max(4, (size - 1).bit_length() // 4)
    c = size // step
    runs = _running_sum(rows[: c * step].reshape(c, step, lanes))
    level1, rest1 = _grouped_sums(runs, step)
    level2, rest2 = _grouped_sums(level1, step)
    return ((_running_sum(rows[c * step:]) + rest1) + rest2) + _running_sum(level2)


def _row_sum(x: np.ndarray, width: int) -> np.ndarray:
    """torch's ``row_sum`` over loads of ``width`` floats: four interleaved accumulators (cascaded), the
    whole loads past the last four added to the first, then the other three added to it -> ``[width]``."""
    v = x[: x.size // width * width].reshape(-1, width)
    ilp = v.shape[0] // 4
    acc = _cascade_sum(v[: ilp * 4].reshape(ilp, 4 * width)).reshape(4, width)
    first = acc[0]
    for row in (*v[ilp * 4:], *acc[1:]):
        first = first + row
    return first


def _serial_sum(x: np.ndarray, lanes: int) -> np.float32:
    """torch's float32 sum of contiguous ``x`` on one thread: with at least one whole vector, `_row_sum` over
    ``lanes``-wide loads, then from 0 the elements past the last whole vector and the lanes one by one;
    else `_row_sum` over single floats."""
    if x.size < lanes:
        return _row_sum(x, 1)[0]
    total = np.float32(0)
    for value in (*x[x.size // lanes * lanes:], *_row_sum(x, lanes)):
        total = np.float32(total + value)
    return total


def _torch_cpu_mean(a: np.ndarray, lanes: int = 8, threads: int = 1) -> np.float32:
    """``torch.from_numpy(a).mean()`` on the CPU for contiguous float32 ``a``, bit for bit: `_serial_sum`,
    or (``threads`` > 1 and at least `_TORCH_GRAIN` elements) one `_serial_sum` per thread's chunk of
    ceil(n / chunks) elements, chunks = min(threads, ceil(n / grain)), then `_serial_sum` of the ``threads``
    slots (unused ones 0); then one float32 division by n."""
    n = a.size
    if n < _TORCH_GRAIN or threads == 1:
        total = _serial_sum(a, lanes)
    else:
        chunk = -(-n // min(threads, -(-n // _TORCH_GRAIN)))
        slots = np.zeros(threads, np.float32)
        for t, s in enumerate(range(0, n, chunk)):
            slots[t] = _serial_sum(a[s: s + chunk], lanes)
        total = _serial_sum(slots, lanes)
    return np.float32(total / np.float32(n))


def _torch_cpu_reduction() -> tuple[int, int]:
    """(SIMD lanes, threads) of torch's CPU float32 sum: 8 lanes (its sum kernel has no AVX512 variant, so
    an AVX512 machine runs the AVX2 one; its plain build's vectors are 8 floats too), on torch's threads
    if it is loaded, else one."""
    torch = _torch()
    return 8, 1 if torch is None else torch.get_num_threads()


def _nest(absmax: np.ndarray, torch_kind: bool) -> tuple[np.ndarray, np.float32, np.ndarray]:
    """Double quantization of float32 ``absmax`` as bitsandbytes does it on the CPU: (uint8 codes, offset,
    float32 absmax per 256). The offset is torch's float32 ``absmax.mean()``: torch's own for torch weights,
    `_torch_cpu_mean` with torch's settings (`_torch_cpu_reduction`) for numpy ones."""
    if torch_kind:
        offset = np.float32(_torch().from_numpy(absmax).mean().item())
    else:
        offset = _torch_cpu_mean(absmax, *_torch_cpu_reduction())
    q, absmax2 = _quantize_dynamic(absmax - offset)
    return q, offset, absmax2


def _nonfinite_message(a: np.ndarray, blocksize: int, nested: bool, dtype_name: str) -> str:
    """Why flat float32 ``a`` is refused, and what bitsandbytes would have made of it: its CPU backend's
    ``absmax`` is the block's max ``|w|``, inf for a block holding an inf (NaN for one holding a NaN,
    torch's max propagating it), so the block dequantizes to ``code * inf`` (inf, or NaN where the code
    is a zero) or NaN throughout; nested, the offset (the mean absmax) is inf or NaN too, and so is
    every reconstructed absmax. In bfloat16 its CPU library rounds a float32 NaN whose bits are all ones
    (torch's ``max()`` over all elements, which it takes of a partial last block, gives that NaN; the
    nested mean passes it on) by adding 0x7fff, which wraps to +0.0."""
    bad = np.flatnonzero(~np.isfinite(a))
    blocks = np.unique(bad // blocksize)
    nan_blocks = np.unique(np.flatnonzero(np.isnan(a)) // blocksize)
    if nan_blocks.size == 0:
        who, absmax = "bitsandbytes", "inf"
    else:       # its CUDA kernel's max may skip a NaN instead: only the CPU backend's result is certain
        who = "bitsandbytes' CPU backend"
        absmax = "NaN" if nan_blocks.size == blocks.size else "inf (NaN in a block holding a NaN)"
    them = "it" if bad.size == 1 else "them"
    msg = (f"w holds {bad.size} NaN or infinite value(s) (the first at flat index {bad[0]}): 4-bit absmax "
           f"quantization needs finite weights. {who} would quantize it with absmax {absmax}, and the "
           f"{blocks.size} block(s) of {blocksize} holding {them} dequantize to NaN/inf")
    if nested:
        msg += (f"; with compress_statistics its offset (the mean absmax) is {'inf' if absmax == 'inf' else 'NaN'} "
                "too, and the whole weight dequantizes to NaN/inf")
    if nan_blocks.size and dtype_name == "bfloat16":
        msg += " (or to 0.0, where its CPU library's bfloat16 rounding wraps a NaN whose bits are all ones)"
    return msg


def quantize_4bit(w: Any, blocksize: int = 64, quant_type: str = "fp4",
                  compress_statistics: bool = False) -> tuple[Any, QuantState]:
    """``(packed, state)`` of weight ``w`` (float16/bfloat16/float32 numpy array or torch tensor, any
    shape), in bitsandbytes' format: see the module docstring for the rules. ``packed`` is uint8
    ``[(n+1)//2, 1]``; ``state.absmax`` float32 ``[ceil(n/blocksize)]``, or with
    ``compress_statistics`` uint8 codes with ``state.offset`` and ``state.state2``. numpy in -> numpy
    out, torch in -> torch tensors on ``w``'s device. The defaults are bitsandbytes' (FP4, blocks of 64,
    no nested statistics)."""
    bs = _check_blocksize(blocksize)
    qt = _check_quant_type(quant_type)
    if not isinstance(compress_statistics, (bool, np.bool_)):
        raise InputTypeError(f"compress_statistics must be True or False; got {compress_statistics!r}")
    a, dtype_name = _host_weight(w)
    n = a.size
    if n == 0:
        raise InputValueError(f"quantize_4bit needs at least one element; got shape {tuple(w.shape)}")
    if not np.isfinite(a).all():
        raise InputValueError(_nonfinite_message(a, bs, bool(compress_statistics), dtype_name))
    absmax = np.empty(-(-n // bs), np.float32)
    packed = np.empty(((n + 1) // 2, 1), np.uint8)
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        blocks, am = _absmax_blocks(a[s:e], bs)
        codes = _codes_4bit(_scaled(blocks, am).reshape(-1)[: e - s + (e - s) % 2], qt)
        packed[s // 2: (e + 1) // 2, 0] = _pack(codes)
        absmax[s // bs: s // bs + am.size] = am

    torch_kind = _is_torch(w)
    shape = w.shape if torch_kind else tuple(w.shape)
    dtype = _dtype_in_kind(dtype_name, torch_kind)
    code = _like(_LUT[qt].copy(), w)
    if compress_statistics:
        q, offset, absmax2 = _nest(absmax, torch_kind)
        state2 = QuantState(absmax=_like(absmax2, w), shape=_shape1(absmax.size, torch_kind),
                            code=_like(DYNAMIC_MAP.copy(), w), blocksize=NESTED_BLOCKSIZE,
                            dtype=_dtype_in_kind("float32", torch_kind))
        state = QuantState(absmax=_like(q, w), shape=shape, code=code, blocksize=bs, quant_type=qt, dtype=dtype,
                           offset=_like(np.array(offset, np.float32), w), state2=state2)
    else:
        state = QuantState(absmax=_like(absmax, w), shape=shape, code=code, blocksize=bs, quant_type=qt, dtype=dtype)
    return _like(packed, w), state


# ----------------------------------------------------------------------------------------------
# checking a state


@dataclass(frozen=True)
class _Resolved:
    """A checked state, on the host: what dequantization needs."""

    quant_type: str
    blocksize: int
    shape: tuple[int, ...]
    numel: int
    dtype_name: str
    absmax: np.ndarray          # de-nested float32, [ceil(numel/blocksize)]


def _field(state: Any, name: str, what: str) -> Any:
    value = getattr(state, name, None)
    if value is None:
        raise InputValueError(f"{what} has no {name}")
    return value


def _float32_array(x: Any, what: str) -> np.ndarray:
    a = _host(x)
    if a.dtype != np.float32:
        raise InputTypeError(f"{what} must be float32; got {a.dtype}")
    return a.reshape(-1)


def _denested(state: Any) -> np.ndarray:
    """The float32 absmax of ``state`` on the host, reconstructed if nested; checks the nested fields."""
    absmax = _host(_field(state, "absmax", "state"))
    state2 = getattr(state, "state2", None)
    if state2 is None:
        if absmax.dtype == np.uint8:
            raise InputValueError("state.absmax holds uint8 codes (a nested state) but state.state2 is None")
        return _float32_array(absmax, "state.absmax (not nested)")
    if absmax.dtype != np.uint8:
        raise InputTypeError(f"a nested state's absmax must be uint8 codes; got {absmax.dtype}")
    q = absmax.reshape(-1)
    offset = _host(_field(state, "offset", "nested state (state2 is set) but it"))
    if offset.size != 1:
        raise InputValueError(f"state.offset must be a scalar; got shape {offset.shape}")
    offset = np.float32(offset.reshape(()).astype(np.float64))
    absmax2 = _float32_array(_field(state2, "absmax", "state.state2"), "state.state2.absmax")
    code2 = _host(_field(state2, "code", "state.state2"))
    if code2.size != 256 or code2.dtype.kind != "f":
        raise InputValueError(f"state.state2.code must be the 256-entry float map; got {code2.size} of {code2.dtype}")
    code2 = code2.reshape(-1).astype(np.float32)
    bs2 = _field(state2, "blocksize", "state.state2")
    if not isinstance(bs2, (int, np.integer)) or isinstance(bs2, bool) or bs2 <= 0:
        raise InputValueError(f"state.state2.blocksize must be a positive int; got {bs2!r}")
    want = -(-q.size // int(bs2))
    if absmax2.size != want:
        raise InputValueError(f"state.state2.absmax has {absmax2.size} entries; {q.size} nested codes in blocks of "
                              f"{bs2} need {want}")
    scale = np.repeat(absmax2, int(bs2))[: q.size]
    return code2[q] * scale + offset        # float32 multiply, then float32 add


def _resolve(state: Any) -> _Resolved:
    """Check every field dequantization uses; errors name the field."""
    qt = getattr(state, "quant_type", None)
    if qt not in QUANT_TYPES:
        raise InputValueError(f"state.quant_type must be 'nf4' or 'fp4'; got {qt!r}")
    bs = _check_blocksize(getattr(state, "blocksize", None), "state.blocksize")
    shape_in = getattr(state, "shape", None)
    try:
        shape = tuple(int(d) for d in shape_in)
    except TypeError:
        raise InputValueError(f"state.shape must be a sequence of ints; got {shape_in!r}") from None
    if any(d < 0 for d in shape):
        raise InputValueError(f"state.shape has a negative dimension: {shape}")
    dtype_in = getattr(state, "dtype", None)
    name = dtypes.name_of(dtype_in)
    if name is None:
        raise InputTypeError(f"state.dtype must be float16, bfloat16 or float32; got {dtype_in!r}")
    code = getattr(state, "code", None)
    if code is not None:
        lut = _host(code).reshape(-1)
        if lut.size != 16 or not np.array_equal(lut.astype(np.float32), _LUT[qt]):
            raise InputValueError(f"state.code is not bitsandbytes' {qt} table (hipskinny.bnb.{qt.upper()}); "
                                  f"got {lut.size} entries")
    n = math.prod(shape)
    absmax = _denested(state)
    want = -(-n // bs)
    if absmax.size != want:
        raise InputValueError(f"state.absmax has {absmax.size} entries; shape {shape} ({n} elements) in blocks of "
                              f"{bs} needs {want}")
    return _Resolved(qt, bs, shape, n, name, absmax)


def absmax_fp32(state: Any) -> Any:
    """The float32 absmax of ``state`` (anything `as_state` accepts), one per block, de-nested
    (``code2[q] * absmax2[b // 256] + offset``) if the state is nested; in the kind of ``state.absmax``
    (torch: on its device)."""
    st, res = _checked(state)
    return _like(res.absmax, st.absmax)


def _packed_bytes(packed: Any) -> np.ndarray:
    """The flat uint8 bytes of ``packed`` (uint8, or bitsandbytes' quant_storage float views of them)."""
    if _is_torch(packed):
        torch = _torch()
        t = packed.detach().to("cpu").contiguous()
        return (t if t.dtype == torch.uint8 else t.view(torch.uint8)).numpy().reshape(-1)
    if isinstance(packed, np.ndarray):
        return np.ascontiguousarray(packed).view(np.uint8).reshape(-1)
    raise InputTypeError(f"packed must be a numpy array or torch tensor of uint8 bytes; got {_describe(packed)}")


def dequantize_4bit(packed: Any, state: Any) -> Any:
    """The weight of ``state.shape`` in ``state.dtype``: ``LUT[code] * absmax[i // blocksize]`` in float32,
    rounded once. ``state``: anything `as_state` accepts (a state dict without prefix). ``packed``: the bytes
    (any shape, e.g. ``[(n+1)//2, 1]``); the result has its kind (numpy, or torch on its device)."""
    st = _checked(state)[1]
    raw = _packed_bytes(packed)
    want = (st.numel + 1) // 2
    if raw.size != want:
        raise InputValueError(f"packed holds {raw.size} bytes, but state.shape {st.shape} has {st.numel} elements, "
                              f"which pack into ceil({st.numel}/2) = {want} bytes")
    lut, bs, n = _LUT[st.quant_type], st.blocksize, st.numel
    out = np.empty(n, np.float32)
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        vals = lut[_unpack(raw[s // 2: (e + 1) // 2])][: e - s]
        scale = np.repeat(st.absmax[s // bs: -(-e // bs)], bs)[: e - s]
        out[s:e] = vals * scale
    out = out.reshape(st.shape)
    if _is_torch(packed):
        torch = _torch()
        return torch.from_numpy(out).to(dtype=getattr(torch, st.dtype_name), device=packed.device)
    return out.astype(_NP_DTYPE[st.dtype_name])


# ----------------------------------------------------------------------------------------------
# foreign states and state dicts

_QS_KEY = "quant_state.bitsandbytes__"


def _scalar_like(value: Any, ref: Any) -> Any:
    """``value`` (tensor, array or number) as a 0-d float32 in ``ref``'s kind: a one-element
    float32 tensor on ``ref``'s device as a view of itself (no copy, no host round trip)."""
    if _is_torch(value) and _is_torch(ref) and value.dtype == _torch().float32 and value.numel() == 1 and \
            value.device == ref.device:
        return value.reshape(())
    return _like(np.array(np.asarray(_host(value), np.float64).reshape(()), np.float32), ref)


def _from_attributes(obj: Any) -> QuantState:
    absmax = obj.absmax
    torch_kind = _is_torch(absmax)
    shape = getattr(obj, "shape", None)
    if shape is not None:
        try:
            shape = tuple(int(d) for d in shape)
        except TypeError:
            raise InputValueError(f"state.shape must be a sequence of ints; got {shape!r}") from None
        if torch_kind:
            shape = _torch().Size(shape)
    state2 = getattr(obj, "state2", None)
    offset = getattr(obj, "offset", None)
    if state2 is not None:
        a2 = _field(state2, "absmax", "state.state2")
        state2 = QuantState(absmax=a2, shape=_shape1(math.prod(tuple(absmax.shape)), torch_kind),
                            code=getattr(state2, "code", None), blocksize=getattr(state2, "blocksize", None),
                            dtype=getattr(state2, "dtype", None))
        if offset is not None:
            offset = _scalar_like(offset, absmax)
    return QuantState(absmax=absmax, shape=shape, code=getattr(obj, "code", None),
                      blocksize=getattr(obj, "blocksize", None), quant_type=getattr(obj, "quant_type", None),
                      dtype=getattr(obj, "dtype", None), offset=offset, state2=state2)


def _json_bytes(value: Any, key: str) -> dict[str, Any]:
    if isinstance(value, str):
        text = value
    else:
        data = value if isinstance(value, (bytes, bytearray)) else _host(value).astype(np.uint8).tobytes()
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise InputValueError(f"state dict entry {key!r} is not UTF-8 text") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputValueError(f"state dict entry {key!r} is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise InputValueError(f"state dict entry {key!r} must hold a JSON object; got {type(meta).__name__}")
    return meta


def _from_state_dict(sd: Mapping[str, Any], prefix: str) -> QuantState:
    def need(container: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in container:
            raise InputValueError(f"{where} has no {key!r}")
        return container[key]

    found = [prefix + _QS_KEY + qt for qt in QUANT_TYPES if prefix + _QS_KEY + qt in sd]
    if len(found) > 1:
        raise InputValueError(f"the state dict has both {found[0]!r} and {found[1]!r}")
    if found:
        meta = _json_bytes(sd[found[0]], found[0])
        where = f"the JSON of {found[0]!r}"
        if meta.get("quant_type") != found[0].rsplit("__", 1)[1]:
            raise InputValueError(f"{found[0]!r} says quant_type {meta.get('quant_type')!r}")
    elif prefix + "quant_type" in sd:          # bitsandbytes' unpacked as_dict(): plain entries
        meta = {k: sd[prefix + k] for k in ("quant_type", "blocksize", "dtype", "shape", "nested_blocksize",
                                            "nested_dtype", "nested_offset") if prefix + k in sd}
        where = f"the state dict (prefix {prefix!r})"
    else:
        others = sorted({k[: k.index(_QS_KEY)] for k in sd if isinstance(k, str) and _QS_KEY in k})
        hint = f"; prefixes with a quant state: {others[:4]}" + (" ..." if len(others) > 4 else "") if others else ""
        raise InputValueError(f"no {prefix + _QS_KEY + 'nf4'!r} or ...fp4 entry in the state dict (prefix {prefix!r})"
                              + hint)
    absmax = need(sd, prefix + "absmax", "the state dict")
    shape = need(meta, "shape", where)
    state2 = offset = None
    if prefix + "nested_absmax" in sd or "nested_offset" in meta:
        state2 = QuantState(absmax=need(sd, prefix + "nested_absmax", "the nested state dict"),
                            code=need(sd, prefix + "nested_quant_map", "the nested state dict"),
                            blocksize=need(meta, "nested_blocksize", where), dtype=need(meta, "nested_dtype", where))
        offset = need(meta, "nested_offset", where)
    torch_kind = _is_torch(absmax)

    def dtype(value: Any) -> Any:       # a name in the JSON: a dtype of the tensors' kind
        name = dtypes.name_of(value)
        return _dtype_in_kind(name, torch_kind) if name else value

    if state2 is not None:
        state2.dtype = dtype(state2.dtype)
    return _from_attributes(QuantState(
        absmax=absmax, shape=None if shape is None else tuple(shape), code=sd.get(prefix + "quant_map"),
        blocksize=need(meta, "blocksize", where), quant_type=need(meta, "quant_type", where),
        dtype=dtype(need(meta, "dtype", where)), offset=offset, state2=state2))


def as_state(obj: Any, prefix: str = "") -> QuantState:
    """A checked hipskinny `QuantState` from any of:

    * a hipskinny `QuantState` (returned as is once checked);
    * an object with bitsandbytes' QuantState attributes (``absmax``, ``shape``, ``code``,
      ``blocksize``, ``quant_type``, ``dtype``, ``offset``, ``state2``), e.g. bitsandbytes' own;
    * an object with a ``quant_state`` attribute (bitsandbytes' ``Params4bit``, ``Linear4bit``);
    * a state dict (mapping) in bitsandbytes' layout: ``{prefix}absmax``, ``{prefix}quant_map``,
      ``{prefix}nested_absmax`` / ``{prefix}nested_quant_map`` if nested, and
      ``{prefix}quant_state.bitsandbytes__nf4`` (or ``__fp4``): uint8 UTF-8 JSON with quant_type,
      blocksize, dtype, shape (and nested_blocksize, nested_dtype, nested_offset). ``prefix`` is the
      weight's name plus a dot, e.g. ``"model.layers.0.mlp.down_proj.weight."`` (the dot is added if
      missing); other keys are ignored.

    Tensors keep their kind (torch or numpy); dtype names become dtypes of that kind. Every field
    dequantization uses is checked (InputValueError / InputTypeError naming the field).
    """
    return _checked(obj, prefix)[0]


def _checked(obj: Any, prefix: str = "") -> tuple[QuantState, _Resolved]:
    if not isinstance(prefix, str):
        raise InputTypeError(f"prefix must be a str; got {type(prefix).__name__}")
    if isinstance(obj, Mapping):
        state = _from_state_dict(obj, prefix + "." if prefix and not prefix.endswith(".") else prefix)
    elif prefix:
        raise InputValueError(f"prefix= applies to a state dict only; got a {_describe(obj)}")
    elif isinstance(obj, QuantState):
        state = obj
    elif getattr(obj, "absmax", None) is not None:
        state = _from_attributes(obj)
    elif hasattr(obj, "quant_state"):
        return _checked(obj.quant_state)
    elif obj is None:
        raise InputValueError("state is None (a Params4bit that was never quantized has no quant_state)")
    else:
        raise InputTypeError("expected a hipskinny or bitsandbytes QuantState, an object with .quant_state "
                             f"(Params4bit), or a state dict; got {_describe(obj)}")
    return state, _resolve(state)


def state_dict(packed: Any, state: Any, prefix: str = "") -> dict[str, Any]:
    """bitsandbytes' checkpoint layout of a quantized weight: ``{prefix}absmax``, ``{prefix}quant_map``,
    ``{prefix}nested_absmax`` and ``{prefix}nested_quant_map`` if nested, and
    ``{prefix}quant_state.bitsandbytes__{quant_type}`` (uint8 UTF-8 JSON, the same bytes bitsandbytes
    writes), plus the packed bytes under the weight's own name: ``prefix`` without its final dot
    (``"model.layers.0.mlp.down_proj.weight."`` -> ``"model.layers.0.mlp.down_proj.weight"``), or
    ``"weight"`` for an empty prefix. Entries are in ``packed``'s kind (numpy, or torch on its
    device). `as_state` with the same prefix reads it back."""
    st, res = _checked(state)
    raw = _packed_bytes(packed)
    if raw.size != (res.numel + 1) // 2:
        raise InputValueError(f"packed holds {raw.size} bytes, but state.shape {res.shape} has {res.numel} elements, "
                              f"which pack into ceil({res.numel}/2) = {(res.numel + 1) // 2} bytes")
    if not isinstance(prefix, str):
        raise InputTypeError(f"prefix must be a str; got {type(prefix).__name__}")
    if prefix and not prefix.endswith("."):
        prefix += "."

    def conv(x: Any) -> Any:
        return x if _is_torch(x) == _is_torch(packed) else _like(_host(x), packed)

    meta: dict[str, Any] = {"quant_type": res.quant_type, "blocksize": res.blocksize, "dtype": res.dtype_name,
                            "shape": list(res.shape)}
    out = {prefix[:-1] if prefix else "weight": packed,
           prefix + "absmax": conv(st.absmax),
           prefix + "quant_map": conv(st.code if st.code is not None else _LUT[res.quant_type].copy())}
    if st.nested:
        out[prefix + "nested_absmax"] = conv(st.state2.absmax)
        out[prefix + "nested_quant_map"] = conv(st.state2.code)
        meta.update(nested_blocksize=int(st.state2.blocksize),
                    nested_dtype=dtypes.name_of(st.state2.dtype) or "float32",
                    nested_offset=float(np.asarray(_host(st.offset), np.float64).reshape(())))
    text = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8).copy()
    out[prefix + _QS_KEY + res.quant_type] = _like(text, packed)
    return out

