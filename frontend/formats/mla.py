"""The FP8 KV caches of sparse MLA decode (DeepSeek V4 / V3.2): layouts and host-side cache tools (the
op, `hipskinny.sparse_mla`, is `hipskinny.ops.sparse_mla`; its float64 reference
`hipskinny.sparse_mla_reference`).
* `LAYOUTS`, `Layout`, `layout_of`, `block_bytes`, `token_bytes` -- the two cache byte layouts.
* `pack_cache` -- quantize float rows into a cache, at chosen slots, garbage elsewhere.
* `dequantize_cache` -- every slot of a cache back to float64 (bf16-rounded as the kernel sees it).
* `bf16_round` -- float64 values rounded to nearest-even bf16 (exactly, no detour through float32).

Layouts (one KV head; a slot is ``block * block_size + offset``):

* ``"v4"`` (DeepSeek V4, FlashMLA's MODEL1): d_qk = 512 = 448 nope + 64 rope, V = all 512 lanes.
  A block holds the data region, ``block_size`` records of 576 B (448 fp8 nope bytes, then 64
  bf16 rope values), then the scale region, ``block_size`` records of 8 B (7 UE8M0 exponents, one
  per 64 nope lanes, then 1 pad byte), then padding up to a multiple of 576 B.
* ``"v32"`` (DeepSeek V3.2, ``fp8_ds_mla``): d_qk = 576 = 512 nope + 64 rope, V = the 512 nope
  lanes. Each token is one 656 B record: 512 fp8 bytes, 4 fp32 scales (one per 128 lanes), 64
  bf16 rope values. Blocks are ``block_size * 656`` B unless the caller pads them.

How a cache is presented: a uint8 array ``[num_blocks, block_size, token_bytes]`` (584 for v4, 656
for v32) with strides ``(block_stride, token_bytes, 1)``, ``block_stride`` a multiple of 16 and at
least ``block_size * token_bytes``: each block's used bytes are contiguous and the padding lies
between blocks. This is the view vLLM hands over (FlashMLA's test quantizer adds a head axis of 1). For v32 row ``p``
of the view is token ``p``. For v4 it is not: 584 is only the per-token byte budget, and row ``p``
is simply bytes ``584p .. 584p+583`` of the block. A v4 kernel takes the base pointer,
``stride(0)`` and ``shape[1]`` and finds token ``p`` of block ``b`` at
``base + b*stride(0) + 576p`` (nope, then rope) and its exponents at
``base + b*stride(0) + 576*block_size + 8p``. The host tools read a cache by its logical contents
(``cache[b].reshape(-1)`` = the block's used bytes), so a contiguous copy of the view reads the same.

Quantization (`pack_cache`, FlashMLA's rule): per tile (64 lanes for v4, 128 for v32) the scale is
the smallest power of two ``>= max(amax / FMAX, 1e-4)``, FMAX = 448 (OCP e4m3fn) or 240 (FNUZ
e4m3fnuz), found exactly (no float32 quotient), so ``|x / scale| <= FMAX`` always. amax is over
finite values; NaN stays NaN and +-inf saturates to +-FMAX. v4 stores the exponent byte
``e = log2(scale) + 127``; v32 stores the scale as fp32. Rope lanes are rounded to bf16.

Dequantization (`dequantize_cache`): ``fp8(byte) * scale`` as an fp32 multiply gives it, then
rounded to nearest-even bf16 (what the kernel feeds its matrix units; for power-of-two scales the
product is exact, so this is one rounding); rope lanes are copied bit-exactly. The packer never
writes exponent bytes 0 or 255, which upstream leaves undefined (the PR's HIP kernel reads 0 as a
zero scale and 255 as +inf, Triton computes exp2(e - 127)); here, as in OCP's E8M0 format, 0 is
2**-127 and 255 is NaN (the whole tile decodes to NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import InputTypeError, InputValueError
from .fp8 import FMAX, check_flavor, decode, encode

__all__ = ["LAYOUTS", "Layout", "bf16_round", "block_bytes", "dequantize_cache", "layout_of", "pack_cache",
           "token_bytes"]


@dataclass(frozen=True)
class Layout:
    """One cache byte layout. ``data_bytes``: the contiguous per-token record (nope fp8, then for
    v32 the fp32 scales, then rope bf16 at ``rope_offset``); ``scale_bytes``: the per-token record
    in the block's scale region (0 if the scales are in the data record); ``block_align``: block
    strides are rounded up to a multiple of it."""

    name: str
    d_qk: int
    d_v: int
    nope: int
    rope: int
    tile: int
    data_bytes: int
    scale_bytes: int
    rope_offset: int
    block_align: int

    @property
    def tiles(self) -> int:
        return self.nope // self.tile

    @property
    def token_bytes(self) -> int:
        return self.data_bytes + self.scale_bytes


LAYOUTS = {
    "v4": Layout("v4", d_qk=512, d_v=512, nope=448, rope=64, tile=64, data_bytes=576, scale_bytes=8,
                 rope_offset=448, block_align=576),
    "v32": Layout("v32", d_qk=576, d_v=512, nope=512, rope=64, tile=128, data_bytes=656, scale_bytes=0,
                  rope_offset=528, block_align=16),
}
_BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
_MIN_SCALE_EXP = -13        # 2**-13 is the smallest power of two >= 1e-4 (FlashMLA's floor)


def layout_of(layout: Any) -> Layout:
    """A `Layout` from its name (or itself)."""
    if isinstance(layout, Layout):
        return layout
    if isinstance(layout, str) and layout in LAYOUTS:
        return LAYOUTS[layout]
    raise InputValueError(f"unknown layout {layout!r}: expected 'v4' (DeepSeek V4, MODEL1) or 'v32' (DeepSeek V3.2)")


def token_bytes(layout: Any = "v4") -> int:
    """Bytes per token, the last dim of a cache view: 584 (v4: 576 data + 8 scale) or 656 (v32)."""
    return layout_of(layout).token_bytes


def block_bytes(layout: Any, block_size: int) -> int:
    """The minimal block stride: ``block_size * token_bytes`` rounded up to the layout's alignment
    (v4: 576, so 64 -> 37440, 2 -> 1728, 256 -> 149760)."""
    lay = layout_of(layout)
    bs = _positive_int(block_size, "block_size")
    return -(-bs * lay.token_bytes // lay.block_align) * lay.block_align


def bf16_round(a: Any) -> np.ndarray:
    """``a`` rounded to nearest-even bf16, as float64: scale by the bf16 quantum of each value's
    binade (8 significant bits; subnormal step 2**-133), round, scale back (all exact in float64).
    Overflow goes to +-inf, NaN stays NaN."""
    x = np.asarray(a, np.float64)
    _, e = np.frexp(x)                                          # |x| in [2**(e-1), 2**e)
    quantum = np.ldexp(1.0, np.maximum(e - 1, -126) - 7)
    r = np.round(x / quantum) * quantum
    return np.where(np.abs(r) > _BF16_MAX, np.copysign(np.inf, x), r)


def _positive_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InputTypeError(f"{name} must be an int; got {type(v).__name__}")
    if v <= 0:
        raise InputValueError(f"{name} must be positive; got {v}")
    return int(v)


def _bf16_bytes(x: np.ndarray) -> np.ndarray:
    """float64 rows -> their bf16 (nearest-even) little-endian bytes, 2 per value."""
    bits = (bf16_round(x).astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    return bits.view(np.uint8).reshape(x.shape[0], -1)


def _bf16_values(b: np.ndarray) -> np.ndarray:
    """Little-endian bf16 bytes [n, 2m] -> float64 values [n, m]."""
    bits = np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16
    with np.errstate(invalid="ignore"):     # garbage bytes hold signalling NaNs; they stay NaN
        return bits.view(np.float32).astype(np.float64)


def _scale_exponents(amax: np.ndarray, fmax: float) -> np.ndarray:
    """log2 of the smallest power of two s >= max(amax / fmax, 1e-4): log2 gives it up to one step
    at exact powers, which comparing fmax * 2**k (exact) with amax settles."""
    k = np.ceil(np.log2(np.maximum(amax / fmax, 2.0**-14))).astype(np.int64)
    k -= np.ldexp(fmax, k - 1) >= amax
    k += np.ldexp(fmax, k) < amax
    return np.maximum(k, _MIN_SCALE_EXP)


def pack_cache(k: Any, *, layout: Any = "v4", block_size: int, fp8: str = "ocp", block_stride: int | None = None,
               num_blocks: int | None = None, slots: Any = None, rng: np.random.Generator | None = None) -> np.ndarray:
    """Quantize float rows ``k [num_tokens, d_qk]`` (bf16, fp16, fp32 or fp64 numpy) into a cache
    view ``[num_blocks, block_size, token_bytes]`` uint8 with strides ``(block_stride, token_bytes,
    1)`` (module docstring). Row ``r`` goes to slot ``slots[r]`` (default ``r``; slots distinct and
    in ``[0, num_blocks * block_size)``). ``num_blocks`` defaults to the fewest blocks holding every
    slot; ``block_stride`` to `block_bytes` (a larger one must be a multiple of 16). Every byte not
    written -- other slots, v4 pad bytes, block padding -- is random when ``rng`` is given (so a
    kernel reading unlisted rows shows it), zero otherwise."""
    lay = layout_of(layout)
    fl = check_flavor(fp8, "fp8")
    bs = _positive_int(block_size, "block_size")
    if not isinstance(k, np.ndarray) or not (k.dtype.kind == "f" or k.dtype == ml_dtypes.bfloat16):
        raise InputTypeError(f"k must be a float numpy array; got {getattr(k, 'dtype', type(k).__name__)}")
    if k.ndim != 2 or k.shape[1] != lay.d_qk:
        raise InputValueError(f"k must be [num_tokens, {lay.d_qk}] for layout {lay.name!r}; got shape {k.shape}")
    n = k.shape[0]
    slot = np.arange(n) if slots is None else np.asarray(slots)
    if slot.dtype.kind not in "iu" or slot.shape != (n,):
        raise InputValueError(f"slots must be {n} integers (one per row of k); got {slot.dtype} {slot.shape}")
    slot = slot.astype(np.int64)
    if n and (slot.min() < 0 or len(np.unique(slot)) != n):
        raise InputValueError("slots must be distinct and non-negative")
    nb = max(1, -(-(int(slot.max()) + 1) // bs)) if n else 1
    if num_blocks is not None:
        if _positive_int(num_blocks, "num_blocks") < nb:
            raise InputValueError(f"num_blocks={num_blocks} is too few: slots reach {int(slot.max())}, "
                                  f"which needs {nb} blocks of {bs}")
        nb = int(num_blocks)
    minimum = block_bytes(lay, bs)
    stride = minimum if block_stride is None else _positive_int(block_stride, "block_stride")
    if stride < minimum or stride % 16:
        raise InputValueError(f"block_stride must be a multiple of 16 and >= {minimum} for layout {lay.name!r} "
                              f"with block_size {bs}; got {stride}")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise InputTypeError(f"rng must be a numpy Generator or None; got {type(rng).__name__}")

    x = k.astype(np.float64)
    nope = x[:, :lay.nope].reshape(n, lay.tiles, lay.tile)
    amax = np.max(np.where(np.isfinite(nope), np.abs(nope), 0.0), axis=2, initial=0.0)
    e = _scale_exponents(amax, FMAX[fl])
    if n and e.max() > 127:
        raise InputValueError(f"k has a tile whose amax needs a scale above 2**127 (amax {amax.max():.3g})")
    scaled = np.clip(nope / np.ldexp(1.0, e)[:, :, None], -FMAX[fl], FMAX[fl])
    q8 = encode(scaled, fl).reshape(n, lay.nope)
    rope = _bf16_bytes(x[:, lay.nope:])

    buf = (rng.integers(0, 256, (nb, stride), dtype=np.uint8) if rng is not None
           else np.zeros((nb, stride), np.uint8))
    blk, pib = np.divmod(slot, bs)
    data = np.lib.stride_tricks.as_strided(buf, (nb, bs, lay.data_bytes), (stride, lay.data_bytes, 1))
    if lay.name == "v4":
        data[blk, pib] = np.concatenate([q8, rope], axis=1)
        scales = np.lib.stride_tricks.as_strided(buf[:, bs * lay.data_bytes:], (nb, bs, 8), (stride, 8, 1))
        scales[blk, pib, :lay.tiles] = (e + 127).astype(np.uint8)      # byte 7 stays as filled
    else:
        f32 = np.ldexp(1.0, e).astype("<f4").view(np.uint8)
        data[blk, pib] = np.concatenate([q8, f32, rope], axis=1)
    return np.lib.stride_tricks.as_strided(buf, (nb, bs, lay.token_bytes), (stride, lay.token_bytes, 1))


def cache_blocks(cache: Any, lay: Layout, block_size: int | None = None,
                  name: str = "cache") -> tuple[np.ndarray, int]:
    """``(blocks, block_size)``: ``blocks [num_blocks, block_size * token_bytes]`` uint8, the used
    bytes of each block, from a cache view ``[num_blocks, block_size, token_bytes]`` or a raw
    ``[num_blocks, >= block_size * token_bytes]`` buffer with ``block_size`` given."""
    if not isinstance(cache, np.ndarray) or cache.dtype != np.uint8:
        raise InputTypeError(f"{name} must be a uint8 numpy array; got {getattr(cache, 'dtype', type(cache).__name__)}")
    tb = lay.token_bytes
    if cache.ndim == 3:
        if cache.shape[2] != tb:
            raise InputValueError(f"{name} must be [num_blocks, block_size, {tb}] for layout {lay.name!r}; "
                                  f"got shape {cache.shape}")
        if block_size is not None and block_size != cache.shape[1]:
            raise InputValueError(f"block_size={block_size} but {name} has block_size {cache.shape[1]}")
        return cache.reshape(cache.shape[0], -1), cache.shape[1]
    if cache.ndim == 2:
        if block_size is None:
            raise InputValueError(f"{name} is a raw [num_blocks, block_bytes] buffer: block_size= is needed")
        bs = _positive_int(block_size, "block_size")
        if cache.shape[1] < bs * tb:
            raise InputValueError(f"{name} has {cache.shape[1]} bytes per block; block_size {bs} needs {bs * tb}")
        return cache[:, :bs * tb], bs
    raise InputValueError(f"{name} must be [num_blocks, block_size, {tb}] (or a raw 2-D buffer); "
                          f"got shape {cache.shape}")


def dequant_slots(blocks: np.ndarray, bs: int, lay: Layout, fl: str, slots: np.ndarray,
                   round_bf16: bool = True) -> np.ndarray:
    """float64 rows ``[len(slots), d_qk]`` of the given (valid) slots."""
    nb = blocks.shape[0]
    blk, pib = np.divmod(np.asarray(slots, np.int64), bs)
    data = blocks[:, :bs * lay.data_bytes].reshape(nb, bs, lay.data_bytes)[blk, pib]
    with np.errstate(invalid="ignore", over="ignore"):     # garbage may hold NaN and huge scales
        if lay.name == "v4":
            e = blocks[:, bs * lay.data_bytes:].reshape(nb, bs, 8)[blk, pib, :lay.tiles].astype(np.int64)
            scale = np.where(e == 255, np.nan, np.ldexp(1.0, e - 127))
        else:
            scale = np.ascontiguousarray(data[:, lay.nope:lay.rope_offset]).view("<f4").astype(np.float64)
        prod = decode(data[:, :lay.nope], fl).reshape(-1, lay.tiles, lay.tile) * scale[:, :, None]
        prod = prod.reshape(-1, lay.nope)
        if round_bf16:      # the fp32 multiply, then bf16 (one rounding for power-of-two scales)
            prod = bf16_round(prod.astype(np.float32))
    rope = _bf16_values(data[:, lay.rope_offset:lay.rope_offset + 2 * lay.rope])
    return np.concatenate([prod, rope], axis=1)


def dequantize_cache(cache: Any, *, layout: Any = "v4", fp8: str = "ocp", block_size: int | None = None,
                     round_bf16: bool = True) -> np.ndarray:
    """Every slot of ``cache`` as float64 ``[num_blocks * block_size, d_qk]``, row = slot: the nope
    lanes ``fp8 * scale`` rounded to bf16 (``round_bf16=False``: the exact product), the rope lanes
    bit-exact. ``cache``: a view as `pack_cache` returns, or a raw ``[num_blocks, block_bytes]``
    buffer with ``block_size``. Exponent bytes 0 and 255: see the module docstring."""
    lay = layout_of(layout)
    fl = check_flavor(fp8, "fp8")
    blocks, bs = cache_blocks(cache, lay, block_size)
    return dequant_slots(blocks, bs, lay, fl, np.arange(blocks.shape[0] * bs), round_bf16)


# ----------------------------------------------------------------------------------------------
# Paged-cache and index-list rules (sparse_mla's inputs)


def block_size_of(v: Any, name: str, layout: str, op: str = "sparse_mla") -> int:
    """A cache's layout rules on its view (anything with dtype, shape and byte strides): uint8
    ``[num_blocks, block_size, token_bytes]`` with contiguous token rows; returns the block size."""
    row = LAYOUTS[layout].token_bytes
    if v.dtype != np.uint8 or len(v.shape) != 3 or v.shape[2] != row:
        raise InputValueError(f"{op}: {name} must be uint8 [num_blocks, block_size, {row}] for layout "
                              f"{layout!r}; got {v.dtype} {v.shape}")
    nb, bs, _ = (int(d) for d in v.shape)
    if bs < 1 or nb * bs >= 2**31:
        raise InputValueError(f"{op}: {name} holds {nb} blocks of {bs} slots; supported: block_size >= 1 "
                              "and fewer than 2**31 slots")
    if v.strides[1:] != (row, 1) or (nb > 1 and v.strides[0] < bs * row):
        raise InputValueError(f"{op}: {name}'s token rows must be contiguous within a block (strides "
                              f"(block_bytes >= {bs * row}, {row}, 1)); got strides {v.strides}")
    return bs


def list_check(iv: Any, pv: Any, idx: str, ptr: str, t: int, op: str = "sparse_mla") -> Any:
    """A token list's rules on its views (anything with dtype and shape): flat int32 indices and an int32
    ``[T + 1]`` indptr -- a wrong dtype is a type error, a wrong rank or length a value error; returns
    the check of a host indptr's values (`indptr_check`)."""
    i32 = np.dtype(np.int32)
    if iv.dtype != i32 or len(iv.shape) != 1:
        raise (InputTypeError if iv.dtype != i32 else InputValueError)(
            f"{op}: {idx} must be a flat int32 array; got {iv.dtype} {iv.shape}")
    if pv.dtype != i32 or pv.shape != (t + 1,):
        raise (InputTypeError if pv.dtype != i32 else InputValueError)(
            f"{op}: {ptr} must be int32 [T + 1] = [{t + 1}]; got {pv.dtype} {pv.shape}")
    return indptr_check(ptr, idx, int(iv.shape[0]), op)


def indptr_check(name: str, idx_name: str, n: int, op: str = "sparse_mla") -> Any:
    """The check of a host indptr's values: from 0 or more, never decreasing, at most ``n`` (the
    length of its index list; a kernel clips a device one instead)."""

    def check(a: np.ndarray) -> None:
        p = a.reshape(-1)
        if p[0] < 0:
            raise InputValueError(f"{op}: {name} must start at 0 or more; got {name}[0] = {p[0]}")
        drops = np.flatnonzero(p[1:] < p[:-1])
        if drops.size:
            i = int(drops[0])
            raise InputValueError(f"{op}: {name} must never decrease; got {name}[{i}] = {p[i]} > "
                                  f"{name}[{i + 1}] = {p[i + 1]}")
        if p[-1] > n:
            raise InputValueError(f"{op}: {name} must end at most at len({idx_name}) = {n}; got "
                                  f"{name}[{p.size - 1}] = {p[-1]}")

    return check


def _int_array(a: Any, name: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:     # a wrong dtype: TypeError; a wrong rank: ValueError
        raise (InputTypeError if arr.dtype.kind not in "iu" else InputValueError)(
            f"{name} must be a 1-D integer array; got {arr.dtype} of shape {arr.shape}")
    return arr.astype(np.int64)


def gather_keys(cache: Any, indices: Any, indptr: Any, lay: Layout, fl: str, t: int,
                name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, cut)``: the dequantized float64 rows (bf16-rounded) of every valid entry of the range
    ``indptr`` owns of ``indices`` (a valid slot: ``0 <= slot < num_blocks * block_size``), in list
    order, token ``i`` owning ``keys[cut[i]:cut[i+1]]``. ``name``: the list's prefix in messages."""
    blocks, bs = cache_blocks(cache, lay, name=f"{name}_cache")
    idx = _int_array(indices, f"{name}_indices")
    ptr = _int_array(indptr, f"{name}_indptr")
    if ptr.shape != (t + 1,):
        raise InputValueError(f"{name}_indptr must have T+1 = {t + 1} entries; got {ptr.shape[0]}")
    if ptr[0] < 0 or ptr[-1] > idx.shape[0] or np.any(np.diff(ptr) < 0):
        raise InputValueError(f"{name}_indptr must be non-decreasing within [0, {idx.shape[0]}] "
                              f"(the length of {name}_indices); got {ptr.tolist()}")
    seg = idx[ptr[0]:ptr[-1]]
    valid = (seg >= 0) & (seg < blocks.shape[0] * bs)     # -1 and out-of-range slots add nothing
    keys = dequant_slots(blocks, bs, lay, fl, seg[valid])
    return keys, np.concatenate([[0], np.cumsum(valid)])[ptr - ptr[0]]
