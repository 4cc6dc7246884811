"""Sparse MLA decode (DeepSeek V4 "MODEL1" and V3.2 FP8 KV caches): `hipskinny.sparse_mla` (also
`hipskinny.mla.sparse_decode`). Semantics, layouts and list rules: README.md, "Sparse MLA decode", and
`sparse_mla_reference` (float64); the caches' formats: `hipskinny.formats.mla`.

For each query token and head, one softmax over the valid slots of its SWA list and extra list, with the
head's sink; slots outside the cache (-1 included) contribute nothing, and no valid slot gives exactly 0.
Host lists are checked before anything is launched; lists on the GPU cannot be checked without a host
sync, so the kernel clips each token's range to ``[0, len(indices)]``: no read leaves the index arrays.

One launch (kernels/sparse_mla.hip) of workgroups (token, head group, split): groups of 16 heads, or
with more than 16 heads the wide kernel's 64 (gfx9) / 32 (gfx11, gfx12), since each workgroup reads
a gathered row once for all its heads; the split count comes from host shapes only
(`split_count`), so graph replays launch the same work and every GPU computes the same bits;
splits merge in split order in the last workgroup to finish (self-cleaning counters). Scratch
from the pool, sized by T, H and the split count.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import ml_dtypes
import numpy as np

from .. import operands, registry
from ..arch import SHIPPED_ARCHS
from ..devices.base import Device
from ..errors import InputTypeError, InputValueError
from ..formats.fp8 import check_flavor
from ..formats.mla import LAYOUTS, block_size_of, cache_blocks, gather_keys, layout_of, list_check
from ..launch import Launch, LaunchPlan, PlanCache, make_launch, make_plan
from ..operands import DeviceCall, HostCall, Operands, Staged
from ..torch_ops import declare, fake_operands, torch_dtype
from . import Exports

FAMILY = "sparse_mla"
INPUTS = ("q", "swa_cache", "swa_indices", "swa_indptr", "extra_cache", "extra_indices", "extra_indptr", "sink")
NAMES = (*INPUTS, "out")
NAMES_LSE = (*INPUTS, "out", "lse")
# kernels/sparse_mla.hip's `enum Facts` (the same for every arch): heads per workgroup (the matrix
# tile's rows), KV rows per tile, output lanes, splits per (token, head group) at most
_FACTS = registry.launch_facts(SHIPPED_ARCHS[0], FAMILY)
HEADS, ROWS, D_V, MAX_SPLITS = (_FACTS[k] for k in ("heads", "rows", "dv", "max_splits"))
# heads per workgroup of the wide kernels (sparse_mla_<layout>_wide), by the arch's wave size
WIDE_HEADS = {64: _FACTS["wide_heads_wave64"], 32: _FACTS["wide_heads_wave32"]}
WORKGROUPS = 512           # split target: two per CU of the largest shipped GPU (256 CUs)
FLAVORS = ("ocp", "fnuz")
PART_SLOT, COUNTER_SLOT = "mla.partials", "mla.counters"
_BF16, _F32, _I32, _U8 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint8)
_plans = PlanCache()
_calls = operands.CallCache()


def sparse_mla(q: Any, swa_cache: Any, swa_indices: Any, swa_indptr: Any, *, extra_cache: Any = None,
                  extra_indices: Any = None, extra_indptr: Any = None, sink: Any = None, scale: float,
                  layout: str = "v4", fp8: Any = "ocp", out: Any = None, return_lse: bool = False,
                  splits: int | None = None) -> Any:
    """Sparse MLA decode attention (module docstring). Returns ``out`` bf16 ``[T, H, 512]`` in q's
    container kind (or writes ``out=``), and with ``return_lse`` also the fp32 ``[T, H]`` LSE.
    ``splits``: the split count (1..16) instead of `split_count`'s choice (tests, tuning)."""
    flavors = _check_options(scale, layout, fp8, splits, (extra_cache, extra_indices, extra_indptr), sink)
    swa_cache, bs0 = _cache_bytes(swa_cache, "swa_cache", layout)
    extra_cache, bs1 = _cache_bytes(extra_cache, "extra_cache", layout) if extra_cache is not None else (None, 0)
    names = NAMES_LSE if return_lse else NAMES
    objs = (q, swa_cache, swa_indices, swa_indptr, extra_cache, extra_indices, extra_indptr, sink, out)
    if return_lse:
        objs = (*objs[:-1], *(out if isinstance(out, tuple) else (out, None)))
    options = (layout, flavors, float(scale), bs0, bs1, return_lse, splits)
    key, addresses = operands.signature(names, objs, options)
    call = _calls.get(key)
    if call is None:
        ops = operands.gather("sparse_mla", names, objs, outputs=2 if return_lse else 1)
        call = _calls.add(key, _bind(ops, *options))
    return call(objs, addresses)


def _check_options(scale: Any, layout: str, fp8: Any, splits: Any, extra: tuple[Any, Any, Any], sink: Any
                   ) -> tuple[str, str]:
    """The call's options and which optional operands come together; returns the caches' flavours."""
    if splits is not None and (not isinstance(splits, int) or not 1 <= splits <= MAX_SPLITS):
        raise InputValueError(f"sparse_mla: splits must be an int in 1..{MAX_SPLITS}; got {splits!r}")
    if layout not in LAYOUTS:
        raise InputValueError(f"sparse_mla: layout {layout!r}; supported: {', '.join(map(repr, LAYOUTS))}")
    flavors = (fp8, fp8) if isinstance(fp8, str) else tuple(fp8) if isinstance(fp8, (tuple, list)) else (fp8,)
    if len(flavors) != 2 or any(f not in FLAVORS for f in flavors):
        raise InputValueError(f"sparse_mla: fp8 must be 'ocp' or 'fnuz', or a pair of them (swa, extra); "
                              f"got {fp8!r}")
    if not isinstance(scale, (int, float, np.floating, np.integer)) or not math.isfinite(float(scale)):
        raise InputValueError(f"sparse_mla: scale must be a finite float; got {scale!r}")
    if any(e is None for e in extra) and any(e is not None for e in extra):
        raise InputValueError("sparse_mla: extra_cache, extra_indices and extra_indptr come together; got "
                              + ", ".join(f"{n}={'given' if e is not None else 'None'}"
                                          for n, e in zip(INPUTS[4:7], extra, strict=True)))
    if layout == "v32" and (extra[0] is not None or sink is not None):
        raise InputValueError("sparse_mla: layout 'v32' has one list and no sink (extra_* and sink must be None)")
    return flavors  # type: ignore[return-value]


def _cache_bytes(cache: Any, name: str, layout: str) -> tuple[Any, int]:
    """A cache as the kernel reads it, and its block size: GPU tensors as they are (block stride =
    stride(0)); host arrays as their blocks' used bytes ``[num_blocks, block_size * row]`` (a view),
    which are staged with a 16-byte-aligned pitch."""
    v = operands.view(cache, name)
    bs = block_size_of(v, name, layout)
    return (cache, bs) if not v.on_host else cache_blocks(v.host_array(), LAYOUTS[layout], name=name)


def group_heads(wave_size: int, h: int) -> int:
    """Heads per workgroup for H = h: the wide kernel's above 16 heads (a gathered row serves them
    all; its head tiles past H are skipped), else 16."""
    return WIDE_HEADS[wave_size] if h > HEADS else HEADS


def split_count(t: int, h: int, capacity: int, heads: int = HEADS) -> int:
    """Splits per (token, head group of `heads`) from host shapes only (same bits on every GPU): the
    shortest `chain_trips` at the average list length ``capacity / t``, at most WORKGROUPS in all and 16."""
    base, tiles = t * -(-h // heads), -(-capacity // (t * ROWS)) if t else 0
    most = max(1, min(MAX_SPLITS, -(-WORKGROUPS // max(base, 1))))
    return min(range(1, most + 1), key=lambda s: (chain_trips(tiles, s), s))   # ties: less traffic


def chain_trips(tiles: int, s: int) -> int:
    """A split's dependent round trips as benchmarks/latency.py measures them: index entries and q,
    one per tile, the stores; s > 1 adds the merge's: slot stores, ticket, every m and l, a pair of
    splits' acc per trip. DSv4 CSA-2048 (20 tiles): 4 splits, 12 (22 unsplit)."""
    return -(-tiles // s) + (2 if s == 1 else 5 + -(-s // 2))


def _bind(ops: Operands, layout: str, flavors: tuple[str, str], scale: float, bs0: int, bs1: int,
          return_lse: bool, splits: int | None) -> Any:
    qv = ops["q"]
    assert qv is not None
    d_qk, row = LAYOUTS[layout].d_qk, LAYOUTS[layout].token_bytes
    if qv.dtype != _BF16:
        raise InputTypeError(f"sparse_mla: q has dtype {qv.dtype}; it must be bfloat16")
    if len(qv.shape) != 3 or qv.shape[2] != d_qk:
        raise InputValueError(f"sparse_mla: q must be [T, H, {d_qk}] for layout {layout!r}; got shape {qv.shape}")
    t, h = int(qv.shape[0]), int(qv.shape[1])
    if h < 1:
        raise InputValueError(f"sparse_mla: q has H={h} heads; at least one is needed")
    caps, checks = [], {}           # checks: a host indptr's values, on every call
    for cache, idx, ptr in (INPUTS[1:4], INPUTS[4:7]):
        iv, pv = ops[idx], ops[ptr]
        if ops[cache] is None:
            continue
        checks[ptr] = list_check(iv, pv, idx, ptr, t)
        caps.append(int(iv.shape[0]))
    n_idx = (*caps, 0)[:2]
    sv = ops["sink"]
    if sv is not None and (sv.dtype != _F32 or len(sv.shape) != 1 or sv.shape[0] < h):
        raise InputValueError(f"sparse_mla: sink must be float32 [>= H] = [>= {h}] (one logit per head); got "
                              f"{sv.dtype} {sv.shape}")
    out_shape, more, device = (t, h, D_V), [((t, h), _F32)] if return_lse else [], ops.device
    operands.check_out(ops, out_shape, _BF16, 0, "out")
    if return_lse:
        operands.check_out(ops, (t, h), _F32, 1, "out[1] (lse)")
    heads = group_heads(device.arch.wave_size, h)
    s = splits if splits is not None else split_count(t, h, sum(caps), heads)
    hb = -(-h // heads)
    bits = registry.launch_flags(device.arch.name, FAMILY)
    flags = ((bits["fnuz0"] if flavors[0] == "fnuz" else 0) | (bits["fnuz1"] if flavors[1] == "fnuz" else 0)
             | (bits["lse"] if return_lse else 0) | (bits["sink"] if sv is not None else 0))
    pointers = (*(NAMES_LSE if return_lse else NAMES), PART_SLOT, COUNTER_SLOT)
    # fp32 partial slots (acc [heads, 512], m, l) only when splits merge; one counter per (token, head group)
    slot = heads * (D_V + 2)
    scratch = ((PART_SLOT, max(16, 4 * slot * t * hb * s * (s > 1))), (COUNTER_SLOT, max(16, 4 * t * hb)))

    def launch(q_strides: tuple[int, int], b0: int, b1: int) -> list[Launch]:
        if t == 0:
            return []
        c0, c1 = ops["swa_cache"], ops["extra_cache"]
        assert c0 is not None
        rows0 = int(c0.shape[0]) * bs0           # slots: blocks x block size (3-D or host bytes view)
        rows1 = 0 if c1 is None else int(c1.shape[0]) * bs1
        # by-value arguments are packed as integers of their size: the fp32 scale as its bits
        bits = int(np.array(scale, np.float32).view(np.uint32))
        return [make_launch(device, _plan(device, layout, heads, t, hb, s), pointers, q="q", c0="swa_cache",
                            idx0="swa_indices", ptr0="swa_indptr", c1="extra_cache", idx1="extra_indices",
                            ptr1="extra_indptr", sink="sink", out="out", lse="lse" if return_lse else None,
                            part=PART_SLOT, counters=COUNTER_SLOT, q_st=q_strides[0], q_sh=q_strides[1],
                            bstride0=b0, bs0=bs0, rows0=rows0, n0=n_idx[0], bstride1=b1, bs1=bs1, rows1=rows1,
                            n1=n_idx[1], scale=bits, o_st=h * D_V, o_sh=D_V, T=t, H=h, S=s, flags=flags)]

    if ops.on_host:
        # q packed [T * H, d_qk]; a cache as its blocks' used bytes ([blocks, bytes] views) at a
        # 16-byte pitch, which is the block stride the kernel gets; the rest flat
        pitch = {c: 0 if ops[c] is None else -(-int(ops[c].shape[1]) // 16) * 16 for c in ("swa_cache", "extra_cache")}
        staged: list[Staged | None] = [Staged("mla.q", t * h, d_qk, d_qk)]
        for name in INPUTS[1:]:
            v = ops[name]
            cached = name in pitch and v is not None
            staged.append(Staged(f"mla.{name}", int(v.shape[0]), int(v.shape[1]), pitch[name]) if cached
                          else operands.flat(ops, name, f"mla.{name}", checks.get(name)))
        return HostCall(ops, launch((h * d_qk, d_qk), pitch["swa_cache"], pitch["extra_cache"]), staged,
                        out_shape=out_shape, out_dtype=_BF16, out_slot="mla.out", scratch_slots=scratch,
                        more_outs=[((t, h), _F32, "mla.lse")] if return_lse else [])
    operands.require("sparse_mla", qv.strides[2] == 1 and qv.strides[0] % 8 == 0 and qv.strides[1] % 8 == 0,
                     f"q must be contiguous along its last dim with rows 16-byte aligned (strides multiples of 8 "
                     f"elements); got strides {qv.strides}")
    strides = []
    for name in ("swa_cache", "extra_cache"):
        v = ops[name]
        if v is None:
            strides.append(0)
            continue
        b = int(v.strides[0]) if v.shape[0] > 1 else -(-int(v.shape[1]) * row // 16) * 16
        operands.require("sparse_mla", b % 16 == 0, f"{name}'s block stride must be a multiple of 16 bytes; "
                         f"got {b}")
        strides.append(b)
    operands.require_contiguous(ops, ("swa_indices", "swa_indptr", "extra_indices", "extra_indptr", "sink"))
    return DeviceCall(ops, launch((int(qv.strides[0]), int(qv.strides[1])), strides[0], strides[1]),
                      out_shape=out_shape, out_dtype=_BF16, aligned=("q", "swa_cache", "extra_cache"),
                      align_message="q and the caches must start at 16-byte aligned addresses",
                      scratch_slots=scratch, more_outs=more)


def _torch_sparse_mla(q: Any, swa_cache: Any, swa_indices: Any, swa_indptr: Any, extra_cache: Any = None,
                      extra_indices: Any = None, extra_indptr: Any = None, sink: Any = None, *, out: Any = None,
                      scale: float, layout: str = "v4", fp8: str = "ocp", extra_fp8: str | None = None,
                      splits: int | None = None, check: bool = False) -> Any:
    """The torch op's form: the lists positional, the extra cache's flavour as ``extra_fp8`` (None: fp8's).
    ``check``: only the op's rules, on fake tensors (`hipskinny.torch_ops.validate`)."""
    flavors = fp8 if extra_fp8 is None else (fp8, extra_fp8)
    lists = (swa_cache, swa_indices, swa_indptr, extra_cache, extra_indices, extra_indptr, sink)
    if not check:
        return sparse_mla(q, *lists[:3], **dict(zip(INPUTS[4:], lists[3:], strict=True)), scale=scale,
                             layout=layout, fp8=flavors, out=out, splits=splits)
    flavors = _check_options(scale, layout, flavors, splits, lists[3:6], sink)
    ops = fake_operands("sparse_mla", NAMES, (q, *lists, out))
    bs = [0 if ops[c] is None else block_size_of(ops[c], c, layout) for c in ("swa_cache", "extra_cache")]
    _bind(ops, layout, flavors, float(scale), bs[0], bs[1], False, splits)
    return None


# torch.ops.hipskinny.sparse_mla / sparse_mla_out (registered by hipskinny.torch_ops), and the same ops
# under their first name, sparse_mla_decode.
TORCH_OPS = tuple(op for name in ("sparse_mla", "sparse_mla_decode") for op in declare(
    name, "Tensor q, Tensor swa_cache, Tensor swa_indices, Tensor swa_indptr, Tensor? extra_cache=None, "
    "Tensor? extra_indices=None, Tensor? extra_indptr=None, Tensor? sink=None", _torch_sparse_mla,
    lambda q, *_: (q[0], q[1], D_V), options='float scale, str layout="v4", str fp8="ocp", str? extra_fp8=None, '
    "int? splits=None", out_dtype=lambda *_, **__: torch_dtype("bfloat16"),
    check=functools.partial(_torch_sparse_mla, check=True)))
EXPORTS = Exports(TORCH_OPS, ("sparse_mla",), report=(
    "Sparse MLA decode: attention over gathered FP8 KV-cache rows, no weight matrix; its work is the index "
    "lists' rows. `python -m benchmarks.sparse_mla` measures whole calls at DeepSeek shapes."))


def _plan(device: Device, layout: str, heads: int, t: int, hb: int, s: int) -> LaunchPlan:
    name = f"{FAMILY}_{layout}" + ("_wide" if heads > HEADS else "")

    def build() -> LaunchPlan:
        fn, meta = registry.load(device, FAMILY).kernel(name)
        return make_plan(fn, meta, (t * hb * s, 1, 1), info={"kernel": name, "splits": s, "head_groups": hb})

    return _plans.get((device, name, t, hb, s), build)


def plan_info(device: Device, t: int, h: int, capacity: int, layout: str = "v4") -> dict[str, Any]:
    """The launch a call of this shape gets on ``device`` (tests, benchmarks)."""
    heads = group_heads(device.arch.wave_size, h)
    plan = _plan(device, layout, heads, t, -(-h // heads), split_count(t, h, capacity, heads))
    return {**plan.info, "grid": plan.grid[0]}


# Reference

_Q_DTYPES = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def sparse_mla_reference(q: Any, swa_cache: Any, swa_indices: Any, swa_indptr: Any, *, extra_cache: Any = None,
                            extra_indices: Any = None, extra_indptr: Any = None, sink: Any = None, scale: float,
                            layout: Any = "v4", fp8: str = "ocp", extra_fp8: str | None = None,
                            return_lse: bool = False) -> Any:
    """The exact semantics (spec section 2) in float64: ``o [T, H, 512]`` (and ``lse [T, H]``).

    For token ``t`` and head ``h``: the keys are the cache rows (`hipskinny.mla.dequantize_cache`,
    bf16-rounded) of the valid entries of ``swa_indices[swa_indptr[t]:swa_indptr[t+1]]`` and of
    the extra list alike, all in one softmax (a slot is valid iff ``0 <= slot < num_blocks *
    block_size``; duplicates count each time); ``s_j = scale * <q[t, h], K_j>`` over all d_qk
    lanes; with the sink logit ``sigma = sink[h]`` (a virtual key whose value is 0):
    ``M = max(max_j s_j, sigma)``, ``Z = sum_j exp(s_j - M) + exp(sigma - M)``,
    ``o = sum_j exp(s_j - M) K_j[:512] / Z``. ``q`` values (bf16, fp16, fp32 or fp64) are taken
    exactly, as are ``sink`` (``>= H`` values; ``sink[:H]`` is used) and ``scale``.

    Edge rules: no valid key gives exactly 0 (with or without a sink); ``sigma = -inf`` is the
    same as no sink, bit for bit; ``sigma = +inf`` gives exactly 0. A NaN in a gathered valid row
    (or in q or the sink) propagates: that token's output for the heads it reaches is NaN; garbage
    in rows no list names never matters. ``lse`` is ``log(sum_j exp(s_j))`` in natural-log units,
    the sink excluded, ``+inf`` for a row with no valid key (FlashMLA's convention).

    ``layout="v4"``: caches as `hipskinny.mla.pack_cache` makes them, ``q [T, H, 512]``.
    ``layout="v32"``: one list (no extra list, no sink), ``q [T, H, 576]``, QK over 576 lanes and
    the output over the first 512. ``extra_fp8``: the extra cache's flavour if it differs from
    ``fp8`` (on gfx942 the SWA cache is FNUZ and the compressed cache OCP).
    """
    lay = layout_of(layout)
    fl = check_flavor(fp8, "fp8")
    xfl = fl if extra_fp8 is None else check_flavor(extra_fp8, "extra_fp8")
    if not isinstance(q, np.ndarray) or q.dtype not in _Q_DTYPES:
        raise InputTypeError(f"q must be a bfloat16, float16, float32 or float64 numpy array; "
                             f"got {getattr(q, 'dtype', type(q).__name__)}")
    if q.ndim != 3 or q.shape[2] != lay.d_qk:
        raise InputValueError(f"q must be [T, H, {lay.d_qk}] for layout {lay.name!r}; got shape {q.shape}")
    t_count, h_count = q.shape[:2]
    q64 = q.astype(np.float64)
    extra = {"extra_cache": extra_cache, "extra_indices": extra_indices, "extra_indptr": extra_indptr}
    given = [n for n, v in extra.items() if v is not None]
    if lay.name == "v32" and (given or sink is not None):
        raise InputValueError(f"layout 'v32' has one index list and no sink; got {', '.join(given or ['sink'])}")
    if given and len(given) != 3:
        raise InputValueError(f"extra_cache, extra_indices and extra_indptr come together; got only {given}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise InputTypeError(f"scale must be a real number; got {type(scale).__name__}")
    sigma = None
    if sink is not None:
        sigma = np.asarray(sink)
        if (sigma.dtype.kind != "f" and sigma.dtype != ml_dtypes.bfloat16) or sigma.ndim != 1:
            raise InputTypeError(f"sink must be a 1-D float array; got {sigma.dtype} of shape {sigma.shape}")
        if sigma.shape[0] < h_count:
            raise InputValueError(f"sink must hold at least H = {h_count} logits; got {sigma.shape[0]}")
        sigma = sigma[:h_count].astype(np.float64)
    lists = [gather_keys(swa_cache, swa_indices, swa_indptr, lay, fl, t_count, "swa")]
    if given:
        lists.append(gather_keys(extra_cache, extra_indices, extra_indptr, lay, xfl, t_count, "extra"))

    o = np.zeros((t_count, h_count, lay.d_v))
    lse = np.full((t_count, h_count), np.inf)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for t in range(t_count):
            keys = np.concatenate([k[c[t]:c[t + 1]] for k, c in lists])
            if not keys.shape[0]:
                continue
            s = float(scale) * (q64[t] @ keys.T)                        # [H, n]
            m = s.max(axis=1)                                           # NaN if any score is
            big = m if sigma is None else np.maximum(m, sigma)
            shift = np.where(big == -np.inf, 0.0, big)                  # all -inf: Z = 0, output 0
            p = np.exp(s - shift[:, None])
            z = p.sum(axis=1)
            if sigma is not None:                                       # +inf sink: weight 1, keys 0
                z = z + np.where(sigma == np.inf, 1.0, np.exp(sigma - shift))
            o[t] = np.where(z[:, None] == 0, 0.0, (p @ keys[:, :lay.d_v]) / z[:, None]) + 0.0   # no -0.0
            ms = np.where(m == -np.inf, 0.0, m)                         # own shift: the sink excluded
            lse[t] = ms + np.log(np.exp(s - ms[:, None]).sum(axis=1))
    return (o, lse) if return_lse else o


sparse_decode = sparse_mla                       # its first name, kept: `hipskinny.mla.sparse_decode`
sparse_decode_reference = sparse_mla_reference
