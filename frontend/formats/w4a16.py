"""AWQ / GPTQ int4 checkpoints (w4a16): repack once on the host into the layout the skinny kernels read.

Reference quality, no GPU: everything is numpy. torch CPU tensors are accepted (converted with
``.numpy()``); torch is never imported here. Tensors on a GPU are refused for now: the repack runs
on the host, once, at load time.

Notation: a linear layer's weight is ``W [M, K]`` (M = out features, K = in features), ``y = x @ W.T``.
Checkpoints store the transpose (``[K, N]`` with N = M). ``G`` = group size (``-1`` = per channel,
one group of all K). Nibble ``i`` of a 32-bit word = bits ``4i..4i+3``. Every tensor may carry a
leading expert dimension ``E`` (a fused-MoE stack); ``[..]`` below stands for it.

Checkpoint formats (quant_specs.md section 2):

* GPTQ (``fmt="gptq"``, AutoGPTQ's v1 and the default; ``fmt="gptq_v2"``): ``qweight`` int32
  ``[.., K/8, M]``, nibble ``i`` of word ``(r, n)`` = ``q[8r + i, n]`` (sequential along K);
  ``qzeros`` int32 ``[.., K/G, M/8]``, nibble ``i`` of word ``(g, c)`` = zero of column ``8c + i``;
  ``scales`` ``[.., K/G, M]``; optional ``g_idx`` ``[.., K]`` (the group of each input row; act-order
  checkpoints permute it). v1 stores ``z - 1`` (a historical AutoGPTQ packing bug every v1 kernel
  undoes), so ``z = stored + 1`` and may be 16; v2 stores ``z``. No ``qzeros`` means symmetric.
* AWQ (``fmt="awq"``, the GEMM version): ``qweight`` int32 ``[.., K, M/8]`` packed along M with the
  interleave `ORDER`: nibble ``i`` of word ``(k, c)`` holds column ``8c + ORDER[i]``; ``qzeros``
  ``[.., K/G, M/8]`` interleaved the same way (true ``z``, always present); ``scales`` ``[.., K/G, M]``;
  no ``g_idx``.
* Value: ``W[m, k] = s[g, m] * (q[k, m] - z[g, m])`` (checkpoint indices ``[k, m]``) with ``g = g_idx[k]``
  (default ``k // G``).

Prepared layout (`Prepared`; the layout the kernels read, one row of W per output, K contiguous):

* ``qweight`` uint32 ``[.., M, K/8]``: word ``(m, j)`` holds W's columns ``k = 8j .. 8j+7`` of row m in
  ExLlama-shuffle order: nibble ``i`` holds ``k = 8j + ORDER[i]``, i.e. the word is
  ``k0 | k2<<4 | k4<<8 | k6<<12 | k1<<16 | k3<<20 | k5<<24 | k7<<28``. The shuffle lets a kernel build
  two adjacent-K fp16 pairs per mask-and-OR against the 0x6400 (1024.0) exponent, with one shift per
  word (quant_specs.md 2.3).
* ``scales`` ``[.., M, K/G]`` in the checkpoint's dtype (or the ``dtype=`` asked for).
* ``zeros`` uint8 ``[.., M, K/G]`` holding the true zero points (0..16), or None when symmetric:
  every zero point is 8 (uint4b8, value ``q - 8``), so kernels bake the 8 into a constant.
* ``perm`` int32 ``[.., K]`` or None: act-order is resolved once here by sorting K so that groups are
  contiguous; prepared column ``j`` is checkpoint row ``perm[j]``, and the op multiplies
  ``x[:, perm]`` by it (the product is the same, only the order of the sum changes).

Why K is permuted instead of carrying ``g_idx`` to the kernel: a group then is G consecutive columns,
so a kernel reads one scale (and zero) per G columns, exactly as without act-order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import ml_dtypes
import numpy as np

from .. import dtypes
from ..errors import InputTypeError, InputValueError
from ..tensors import describe as _describe
from ..tensors import is_torch as _is_torch
from ..tensors import torch_module as _torch

__all__ = [
    "FORMATS",
    "GROUP_SIZES",
    "ORDER",
    "SYMMETRIC_ZERO",
    "Prepared",
    "dequantize_checkpoint",
    "pack_checkpoint",
    "prepare",
    "unprepare",
]

FORMATS = ("awq", "gptq", "gptq_v2")
GROUP_SIZES = (32, 64, 128, -1)
# The ExLlama shuffle along K and AWQ's interleave along M are the same permutation: nibble i holds
# element ORDER[i] of its 8.
ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_SEQUENTIAL = tuple(range(8))
SYMMETRIC_ZERO = 8          # uint4b8: value = q - 8

_WORD_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


@dataclass(frozen=True, eq=False)
class Prepared:
    """A w4a16 weight in the kernels' layout (see the module docstring for the exact bit layout).

    ``qweight``: uint32 ``[.., M, K/8]``, ExLlama-shuffled nibbles along K; ``scales``: ``[.., M, K/G]``;
    ``zeros``: uint8 ``[.., M, K/G]`` true zero points, or None when symmetric; ``perm``: int32
    ``[.., K]`` act-order permutation of K (prepared column j = original column perm[j]), or None;
    ``group_size``: the resolved G (K for per-channel); ``shape``: ``(M, K)`` of one weight;
    ``symmetric``: every zero point was 8; ``fmt``: the checkpoint format it came from;
    ``experts``: E for an expert stack, None for a plain layer.
    """

    qweight: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    perm: np.ndarray | None
    group_size: int
    shape: tuple[int, int]
    symmetric: bool
    fmt: str
    experts: int | None

    def map(self, fn: Any) -> Prepared:
        """The same weight with ``fn`` applied to each array (qweight, scales, zeros, perm), e.g. to
        place it on a GPU: ``p.map(lambda a: torch.from_numpy(a).to("cuda"))`` (bfloat16 scales:
        convert through their int16 view)."""
        return replace(self, qweight=fn(self.qweight), scales=fn(self.scales),
                       zeros=None if self.zeros is None else fn(self.zeros),
                       perm=None if self.perm is None else fn(self.perm))


# ----------------------------------------------------------------------------------------------
# inputs: numpy or torch CPU tensors, without importing torch


def _host(x: Any, name: str) -> np.ndarray:
    """``x`` as a numpy array (torch bfloat16 as ml_dtypes.bfloat16); torch tensors must be on the CPU."""
    if isinstance(x, np.ndarray):
        return x
    if _is_torch(x):
        if x.device.type != "cpu":
            raise InputValueError(f"prepare runs on the host for now: pass {name} as a CPU tensor ({name}.cpu()) "
                                  f"or a numpy array; got a tensor on {x.device}")
        torch = _torch()
        t = x.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    raise InputTypeError(f"{name} must be a numpy array or a torch CPU tensor; got {_describe(x)}")


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


# ----------------------------------------------------------------------------------------------
# checking a checkpoint


@dataclass(frozen=True)
class _Checkpoint:
    """Checked checkpoint tensors, always with a leading expert axis (E = 1 for a plain layer)."""

    fmt: str
    group_size: int             # resolved: K for per-channel
    m: int
    k: int
    experts: int | None
    qweight: np.ndarray         # uint32 [E, K/8, M] (GPTQ) or [E, K, M/8] (AWQ)
    scales: np.ndarray          # [E, K/G, M]
    qzeros: np.ndarray | None   # uint32 [E, K/G, M/8]
    g_idx: np.ndarray | None    # int64 [E, K]


def _check_format(fmt: Any, group_size: Any, bits: Any = 4) -> None:
    if not (isinstance(bits, (int, np.integer)) and not isinstance(bits, bool) and bits == 4):
        raise InputValueError(f"only 4-bit weights are supported (bits=4); got bits={bits!r}")
    if fmt not in FORMATS:
        raise InputValueError(f"fmt must be 'awq', 'gptq' (v1, zero points stored minus 1) or 'gptq_v2'; got {fmt!r}")
    if not (isinstance(group_size, (int, np.integer)) and not isinstance(group_size, bool)
            and group_size in GROUP_SIZES):
        raise InputValueError(f"group_size must be 32, 64, 128 or -1 (per-channel); got {group_size!r}")


def _words(x: Any, name: str) -> np.ndarray:
    a = _host(x, name)
    if a.dtype not in _WORD_DTYPES:
        raise InputTypeError(f"{name} must be int32 or uint32 (8 packed 4-bit values per word); got {a.dtype}")
    return a.view(np.uint32)


def _checkpoint(qweight: Any, scales: Any, qzeros: Any, g_idx: Any, fmt: Any, group_size: Any,
                bits: Any = 4) -> _Checkpoint:
    _check_format(fmt, group_size, bits)
    gptq = fmt != "awq"
    layout = "[K/8, M]" if gptq else "[K, M/8]"
    qw = _words(qweight, "qweight")
    if qw.ndim not in (2, 3):
        raise InputValueError(f"qweight must be 2-D {layout} (fmt={fmt!r}) or 3-D [E, {layout[1:]} (an expert "
                              f"stack); got shape {_dims(qw.shape)}")
    stacked = qw.ndim == 3
    e = qw.shape[0] if stacked else 1
    sc = _host(scales, "scales")
    if sc.dtype not in dtypes.FLOATS:
        raise InputTypeError(f"scales must be float16, bfloat16 or float32; got {sc.dtype}")
    qz = None if qzeros is None else _words(qzeros, "qzeros")
    gi = None if g_idx is None else _host(g_idx, "g_idx")
    if not gptq and gi is not None:
        raise InputValueError("g_idx (act-order) is a GPTQ field; fmt='awq' checkpoints have none")
    if not gptq and qz is None:
        raise InputValueError("fmt='awq' needs qzeros [K/G, M/8] (AWQ checkpoints always store zero points)")
    if gi is not None and gi.dtype.kind not in "iu":
        raise InputTypeError(f"g_idx must be an integer array (int32 in checkpoints); got {gi.dtype}")

    lead = "E, " if stacked else ""
    for name, arr, what in (("scales", sc, "K/G, M"), ("qzeros", qz, "K/G, M/8"), ("g_idx", gi, "K")):
        if arr is None:
            continue
        if arr.ndim != what.count(",") + 1 + stacked:
            raise InputValueError(f"{name} must be [{lead}{what}] like qweight's {qw.ndim}-D "
                                  f"{'[E, ' + layout[1:] if stacked else layout}; got shape {_dims(arr.shape)}")
        if stacked and arr.shape[0] != e:
            raise InputValueError(f"expert stack mismatch: qweight has E = {e} experts, {name} has {arr.shape[0]}")

    rows, cols = qw.shape[-2:]
    k, m = (rows * 8, cols) if gptq else (rows, cols * 8)
    if k == 0 or m == 0:
        raise InputValueError(f"qweight {layout} is empty: shape {_dims(qw.shape)}")
    k_from = f"qweight's {rows} rows x 8" if gptq else f"qweight's {rows} rows"
    if k % 8:
        raise InputValueError(f"K must be a multiple of 8 (8 values per prepared word); got K = {k} ({k_from})")
    g = k if group_size == -1 else int(group_size)
    if k % g:
        raise InputValueError(f"group_size {g} does not divide K = {k} ({k_from})")
    groups = k // g
    if sc.shape[-2] != groups:
        implied = f"; scales imply K = {sc.shape[-2]} x {g} = {sc.shape[-2] * g}" if group_size != -1 else ""
        raise InputValueError(f"scales must be [{lead}K/G, M] with K/G = {k}/{g} = {groups} groups (K = {k} from "
                              f"{k_from}){implied}; got shape {_dims(sc.shape)}")
    if sc.shape[-1] != m:
        if gptq:
            raise InputValueError(f"qweight [K/8, M] and scales [K/G, M] disagree on M: qweight has M = {m} columns, "
                                  f"scales {sc.shape[-1]}")
        raise InputValueError(f"fmt='awq' qweight must be [K, M/8] = [{k}, {sc.shape[-1] / 8:g}] for the "
                              f"M = {sc.shape[-1]} columns of scales; got {cols} columns ({cols} x 8 = {m})")
    if qz is not None:
        if m % 8:
            raise InputValueError(f"qzeros packs 8 zero points per word along M, so M must be a multiple of 8; "
                                  f"got M = {m}")
        if qz.shape[-2:] != (groups, m // 8):
            raise InputValueError(f"qzeros must be [{lead}K/G, M/8] = {_dims(qz.shape[:-2] + (groups, m // 8))} "
                                  f"(K = {k}, group_size {g}, M = {m}); got shape {_dims(qz.shape)}")
    if gi is not None:
        if gi.shape[-1] != k:
            raise InputValueError(f"g_idx must have K = {k} entries ({k_from}), one group per input row; "
                                  f"got shape {_dims(gi.shape)}")
        lo, hi = int(gi.min()), int(gi.max())
        if lo < 0 or hi >= groups:
            raise InputValueError(f"g_idx values must lie in [0, {groups}) (K/G groups, K = {k}, group_size {g}); "
                                  f"got min {lo}, max {hi}")
        gi = gi.astype(np.int64)

    def with_e(a: np.ndarray | None) -> np.ndarray | None:
        return a if a is None or stacked else a[None]

    return _Checkpoint(fmt=fmt, group_size=g, m=m, k=k, experts=e if stacked else None, qweight=with_e(qw),
                       scales=with_e(sc), qzeros=with_e(qz), g_idx=with_e(gi))


# ----------------------------------------------------------------------------------------------
# nibbles


def _unpack_last(words: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """uint8 codes ``[..., 8C]`` from uint32 words ``[..., C]`` whose nibble i holds element ``order[i]``
    of its 8."""
    out = np.empty(words.shape + (8,), np.uint8)
    for i, pos in enumerate(order):
        out[..., pos] = (words >> np.uint32(4 * i)) & np.uint32(15)
    return out.reshape(words.shape[:-1] + (words.shape[-1] * 8,))


def _pack_last(codes: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """uint32 words ``[..., C]`` from codes ``[..., 8C]`` (0..15): nibble i holds element ``order[i]``."""
    c = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // 8, 8))
    words = np.zeros(c.shape[:-1], np.uint32)
    for i, pos in enumerate(order):
        words |= c[..., pos].astype(np.uint32) << np.uint32(4 * i)
    return words


def _codes(ck: _Checkpoint, e: int) -> np.ndarray:
    """Expert e's codes as W [M, K] (uint8)."""
    if ck.fmt == "awq":
        return _unpack_last(ck.qweight[e], ORDER).T                 # [K, M] -> [M, K]
    return _unpack_last(ck.qweight[e].T, _SEQUENTIAL)               # [M, K/8] -> [M, K]


def _zero_points(ck: _Checkpoint) -> np.ndarray | None:
    """True zero points uint8 [E, K/G, M] (v1's +1 applied, so 0..16), or None without qzeros."""
    if ck.qzeros is None:
        return None
    z = _unpack_last(ck.qzeros, ORDER if ck.fmt == "awq" else _SEQUENTIAL)
    return z + np.uint8(1) if ck.fmt == "gptq" else z


def _act_order_perm(g_idx: np.ndarray, group_size: int, expert: int | None) -> np.ndarray | None:
    """The stable sort of K by group, or None when g_idx is the default ``k // G``."""
    k = g_idx.size
    if np.array_equal(g_idx, np.arange(k) // group_size):
        return None
    counts = np.bincount(g_idx, minlength=k // group_size)
    bad = int(np.flatnonzero(counts != group_size)[0]) if (counts != group_size).any() else None
    if bad is not None:
        where = "" if expert is None else f"expert {expert}: "
        raise InputValueError(f"{where}g_idx puts {counts[bad]} rows in group {bad}; act-order needs exactly "
                              f"group_size = {group_size} rows in every group (so sorting K makes groups contiguous)")
    return np.argsort(g_idx, kind="stable").astype(np.int32)


def check_perm(perm: np.ndarray, k: int, what: str, *, experts: bool = False) -> None:
    """InputValueError ``"<what>; <reason>"`` unless every row of an int32 ``[.., K]`` perm is a
    permutation of 0..K-1 (the ops check host perms so before every launch: the kernels index x and
    W by it). ``experts``: the rows are a stack's, named in the message."""
    rows = np.ascontiguousarray(perm).reshape(-1, k)
    where = (lambda e: f"expert {e}: ") if experts else (lambda e: "")
    out = rows.view(np.uint32) >= k                      # negative entries too
    if out.any():
        e, j = (int(i) for i in np.argwhere(out)[0])
        raise InputValueError(f"{what}; {where(e)}perm[{j}] = {rows[e, j]} is outside [0, {k})")
    seen = np.zeros(rows.shape, bool)
    seen[np.arange(rows.shape[0])[:, None], rows] = True
    if not seen.all():                                  # K entries in range and one missing: one repeats
        e = int(np.argwhere(~seen)[0][0])
        counts = np.bincount(rows[e], minlength=k)
        v = int(np.argmax(counts > 1))
        raise InputValueError(f"{what}; {where(e)}{v} appears {counts[v]} times")


# ----------------------------------------------------------------------------------------------
# the public functions


def prepare(qweight: Any, scales: Any, qzeros: Any = None, g_idx: Any = None, *, fmt: str, group_size: int,
            bits: int = 4, dtype: Any = None) -> Prepared:
    """Repack an AWQ / GPTQ int4 checkpoint (a layer, or an expert stack with a leading E on every
    tensor) into the kernels' layout, on the host.

    ``fmt``: ``"awq"``, ``"gptq"`` (v1: stored zero points are z - 1) or ``"gptq_v2"``. ``group_size``:
    32, 64, 128, or -1 for per-channel. ``dtype``: cast the scales (e.g. to bfloat16 for bf16
    activations); None keeps the checkpoint's dtype. The result is symmetric (no zeros) when every zero
    point is 8 or a GPTQ checkpoint has no qzeros; an act-order ``g_idx`` is resolved into ``perm``.
    Bad inputs raise InputValueError / InputTypeError naming the expected shape or dtype.
    """
    ck = _checkpoint(qweight, scales, qzeros, g_idx, fmt, group_size, bits)
    scale_dtype = ck.scales.dtype if dtype is None else dtypes.read(dtype, "dtype")
    n_e = ck.qweight.shape[0]
    z = _zero_points(ck)
    symmetric = z is None or bool((z == SYMMETRIC_ZERO).all())

    perms = [None] * n_e
    if ck.g_idx is not None:
        perms = [_act_order_perm(ck.g_idx[e], ck.group_size, e if ck.experts else None) for e in range(n_e)]
    perm = None
    if any(p is not None for p in perms):        # a stack keeps one perm per expert (identity where default)
        perm = np.stack([np.arange(ck.k, dtype=np.int32) if p is None else p for p in perms])

    words = np.empty((n_e, ck.m, ck.k // 8), np.uint32)
    for e in range(n_e):
        codes = _codes(ck, e)
        if perm is not None:
            codes = codes[:, perm[e]]
        words[e] = _pack_last(codes, ORDER)
    scales_p = np.swapaxes(ck.scales, -1, -2).astype(scale_dtype, order="C", copy=True)
    zeros_p = None if symmetric else np.swapaxes(z, -1, -2).copy(order="C")

    def plain(a: np.ndarray | None) -> np.ndarray | None:
        return a if a is None or ck.experts else a[0]

    return Prepared(qweight=plain(words), scales=plain(scales_p), zeros=plain(zeros_p), perm=plain(perm),
                    group_size=ck.group_size, shape=(ck.m, ck.k), symmetric=symmetric, fmt=ck.fmt,
                    experts=ck.experts)


def unprepare(prepared: Prepared, dtype: Any = np.float16) -> np.ndarray:
    """W ``[.., M, K]`` back from a `Prepared`, in the original K order (``perm`` undone).

    ``(q - z) * s`` is computed in float32 and rounded once to ``dtype`` (float16, bfloat16 or float32).
    In float32 it is exact for float16 and bfloat16 scales (a 5-bit integer times an 11- or 8-bit
    significand), and correctly rounded for float32 scales.
    """
    if not isinstance(prepared, Prepared):
        raise InputTypeError(f"unprepare takes a hipskinny.w4a16.Prepared; got {_describe(prepared)}")
    out_dtype = dtypes.read(dtype, "dtype")
    p = prepared
    m, k = p.shape

    def with_e(a: np.ndarray | None) -> np.ndarray | None:
        return a if a is None or p.experts else a[None]

    qw, sc, zs, perm = with_e(p.qweight), with_e(p.scales), with_e(p.zeros), with_e(p.perm)
    out = np.empty((qw.shape[0], m, k), out_dtype)
    for e in range(qw.shape[0]):
        q = _unpack_last(qw[e], ORDER).astype(np.float32)
        z = np.float32(SYMMETRIC_ZERO) if zs is None else np.repeat(zs[e].astype(np.float32), p.group_size, -1)
        w = (q - z) * np.repeat(sc[e].astype(np.float32), p.group_size, -1)
        if perm is not None:
            w_orig = np.empty_like(w)
            w_orig[:, perm[e]] = w
            w = w_orig
        out[e] = w.astype(out_dtype)
    return out if p.experts else out[0]


def dequantize_checkpoint(qweight: Any, scales: Any, qzeros: Any = None, g_idx: Any = None, *, fmt: str,
                          group_size: int) -> np.ndarray:
    """float64 W ``[.., M, K]`` straight from the checkpoint tensors, by the spec's formula
    ``W[m, k] = s[g, m] * (q[k, m] - z[g, m])``, ``g = g_idx[k]`` (default ``k // G``), with ``z + 1``
    for v1 GPTQ and ``z = 8`` for GPTQ without qzeros.

    A reference for tests: it indexes nibbles by the spec's arithmetic, independently of `prepare`'s
    repacking, and takes any in-range ``g_idx`` (act-order or not).
    """
    ck = _checkpoint(qweight, scales, qzeros, g_idx, fmt, group_size)
    k, n = np.arange(ck.k)[:, None], np.arange(ck.m)[None, :]
    awq_nibble = np.argsort(ORDER)              # nibble holding column j of 8 (AWQ's reverse order)
    if ck.fmt == "awq":
        q = (ck.qweight[:, k, n // 8] >> (4 * awq_nibble[n % 8]).astype(np.uint32)) & 15
    else:
        q = (ck.qweight[:, k // 8, n] >> (4 * (k % 8)).astype(np.uint32)) & 15
    g = ck.g_idx if ck.g_idx is not None else np.broadcast_to(np.arange(ck.k) // ck.group_size,
                                                              (ck.qweight.shape[0], ck.k))
    e = np.arange(ck.qweight.shape[0])[:, None]
    if ck.qzeros is None:
        z = np.float64(SYMMETRIC_ZERO)
    else:
        grp = np.arange(ck.k // ck.group_size)[:, None]
        nib = awq_nibble[n % 8] if ck.fmt == "awq" else n % 8
        zg = ((ck.qzeros[:, grp, n // 8] >> (4 * nib).astype(np.uint32)) & 15).astype(np.float64)   # [E, K/G, M]
        z = (zg + (1 if ck.fmt == "gptq" else 0))[e, g]                                          # [E, K, M]
    s = ck.scales.astype(np.float64)[e, g]
    w = np.swapaxes(s * (q.astype(np.float64) - z), -1, -2)
    return w if ck.experts else w[0]


def pack_checkpoint(codes: Any, zeros: Any, scales: Any, *, fmt: str, group_size: int,
                    g_idx: Any = None) -> dict[str, np.ndarray | None]:
    """Checkpoint tensors from integer codes, for tests: ``{"qweight", "scales", "qzeros", "g_idx"}``,
    ready for ``prepare(**ckpt, fmt=..., group_size=...)``.

    Given in hipskinny's orientation: ``codes`` W ``[.., M, K]`` (0..15), ``zeros`` the TRUE zero
    points ``[.., M, K/G]`` (1..16 for v1 ``"gptq"``, which stores z - 1; 0..15 otherwise) or None for
    symmetric (GPTQ then has no qzeros; AWQ stores 8s), ``scales`` ``[.., M, K/G]`` (kept in their
    dtype). ``g_idx`` ``[.., K]`` is passed through as int32 (it only says which group a column uses).
    Quantizing real weights is out of scope.
    """
    _check_format(fmt, group_size)
    q = _host(codes, "codes")
    if q.dtype.kind not in "iu" or q.ndim not in (2, 3):
        raise InputTypeError(f"codes must be an integer array W [M, K] or [E, M, K]; got {q.dtype} "
                             f"{_dims(q.shape)}")
    if q.size and (q.min() < 0 or q.max() > 15):
        raise InputValueError(f"codes must lie in 0..15; got min {q.min()}, max {q.max()}")
    m, k = q.shape[-2:]
    g = k if group_size == -1 else int(group_size)
    if k % 8 or k % g or (fmt == "awq" or zeros is not None) and m % 8:
        raise InputValueError(f"pack_checkpoint needs K a multiple of 8 and of group_size, and M a multiple of 8 "
                              f"when zero points are packed along M; got M = {m}, K = {k}, group_size {group_size}")
    sc = _host(scales, "scales")
    if sc.shape != q.shape[:-1] + (k // g,):
        raise InputValueError(f"scales must be {_dims(q.shape[:-1] + (k // g,))} ([.., M, K/G]); got {_dims(sc.shape)}")
    if zeros is None and fmt == "awq":
        zeros = np.full(sc.shape, SYMMETRIC_ZERO)
    qzeros = None
    if zeros is not None:
        z = _host(zeros, "zeros")
        if z.shape != sc.shape:
            raise InputValueError(f"zeros must be {_dims(sc.shape)} ([.., M, K/G]); got {_dims(z.shape)}")
        lo = 1 if fmt == "gptq" else 0
        if z.size and (z.min() < lo or z.max() > lo + 15):
            raise InputValueError(f"fmt={fmt!r} zero points must lie in {lo}..{lo + 15}"
                                  f"{' (v1 stores z - 1)' if fmt == 'gptq' else ''}; got min {z.min()}, max {z.max()}")
        stored = np.swapaxes(z.astype(np.int64) - lo, -1, -2).astype(np.uint8)          # [.., K/G, M]
        qzeros = _pack_last(stored, ORDER if fmt == "awq" else _SEQUENTIAL).view(np.int32)
    q8 = q.astype(np.uint8)
    if fmt == "awq":
        qweight = _pack_last(np.swapaxes(q8, -1, -2), ORDER)                              # [.., K, M/8]
    else:
        qweight = np.swapaxes(_pack_last(q8, _SEQUENTIAL), -1, -2)                       # [.., K/8, M]
    return {"qweight": np.ascontiguousarray(qweight).view(np.int32),
            "scales": np.swapaxes(sc, -1, -2).copy(order="C"),
            "qzeros": qzeros,
            "g_idx": None if g_idx is None else np.asarray(_host(g_idx, "g_idx"), np.int32)}
