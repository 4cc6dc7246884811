"""hipskinny.sparse_mla on the emulator, every shipped arch, against the float64 reference.

Tolerance (derived). The kernel's K rows are exact (FP8 times a power of two fits bf16), q is
bf16, so every score s_j is an fp32 sum of exact products: relative error ~ d * 2^-24 of
sum |q k|, tiny next to what follows. p_j = exp(s_j - m) is rounded to bf16 for the matrix units
(relative 2^-9) while l sums the fp32 p_j; the products and sums of PV are fp32. So
|acc / l - o| <= 2^-9 * sum_j w_j |V_j|, w_j the softmax weights, and the bf16 output adds half
an ulp, <= 2^-9 |o|. The scores are fp32 sums of d exact products: each s_j - m is off by at most
2 (d + 2) 2^-24 max_j scale sum |q k_j|, which moves o by that times sum_j w_j |V_j - o|. The
test allows 1.05 times the sum (fp32 PV sums, exp2's ulp). FlashMLA's own tolerance (abs 1e-3,
rel 2.01 / 128) assumes its tests' data (standard normal rows, long lists: the P rounding errors
of many rows cancel rather than add); `test_flashmla_tolerance` holds the kernel to it on such data.
LSE is fp32 m + log(l): FlashMLA's abs 1e-6 + rel 8.01 / 65536.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import hipskinny
from hipskinny import InputTypeError, InputValueError, mla
from hipskinny.arch import ARCHS as INFO
from hipskinny.arch import SHIPPED_ARCHS
from hipskinny.emulator import EmulatedDevice
from hipskinny.ops import sparse_mla as op
from hipskinny.ops.sparse_mla import sparse_mla_reference

BF16 = np.dtype(ml_dtypes.bfloat16)
ARCHS = list(SHIPPED_ARCHS)


def _device(arch: str, cus: int | None = None, seed: int | None = None) -> EmulatedDevice:
    return EmulatedDevice(arch, cus, seed=seed, strict_lds=True)


def _keys(rng, n: int, d: int) -> np.ndarray:
    """Rows with tiles of different magnitudes (the per-tile scales matter)."""
    mag = np.exp2(rng.integers(-3, 3, (n, d // 64 + 1))).repeat(64, axis=1)[:, :d]
    return rng.standard_normal((n, d)) * mag


def _list(rng, lens, rows: int, slots: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ragged int32 lists of the given lengths into the first `rows` slots (the packed ones; the
    cache has `slots`), with -1, out-of-range and duplicate entries, and `start` unused entries
    before the first (indptr[0] = start)."""
    parts = []
    for n in lens:
        idx = rng.integers(0, rows, n)
        if n >= 3:
            idx[0], idx[1] = -1, slots + 5      # invalid: skipped
            idx[2] = idx[n - 1]                 # a duplicate: counted twice
        parts.append(idx)
    flat = np.concatenate([rng.integers(-1, rows, start), *parts]).astype(np.int32)
    ptr = (start + np.concatenate([[0], np.cumsum(lens)])).astype(np.int32)
    return flat, ptr


def _case(rng, layout: str, t: int, h: int, lens0, lens1=None, *, bs0=64, bs1=2, pad=0, fp8=("ocp", "ocp"),
          sink=False):
    lay = mla.LAYOUTS[layout]
    n0 = sum(lens0) + 40
    c0 = mla.pack_cache(_keys(rng, n0, lay.d_qk), layout=layout, block_size=bs0, fp8=fp8[0], rng=rng,
                        block_stride=mla.block_bytes(layout, bs0) + pad)
    i0, p0 = _list(rng, lens0, n0, c0.shape[0] * bs0, start=3)
    kw = {}
    if lens1 is not None:
        n1 = sum(lens1) + 7
        kw["extra_cache"] = mla.pack_cache(_keys(rng, n1, lay.d_qk), layout=layout, block_size=bs1, fp8=fp8[1])
        kw["extra_indices"], kw["extra_indptr"] = _list(rng, lens1, n1, kw["extra_cache"].shape[0] * bs1)
    if sink:
        kw["sink"] = rng.uniform(-2, 2, h + 3).astype(np.float32)
    q = (rng.standard_normal((t, h, lay.d_qk)) * 0.5).astype(BF16)
    return q, c0, i0, p0, kw


def _weights_abs_v(q, c0, i0, p0, kw, layout, fp8, scale):
    """(sum_j w_j |V_j|, max_j scale * sum |q k_j|) per (t, h): the softmax weights (sink in the
    denominator) applied to |V|, and the largest score magnitude bound (for the fp32 QK error)."""
    lay = mla.LAYOUTS[layout]
    absolute = {}
    for name, cache, f in (("swa", c0, fp8[0]), ("extra", kw.get("extra_cache"), fp8[1])):
        if cache is None:
            continue
        k = mla.dequantize_cache(cache, layout=layout, fp8=f)
        absolute[name] = k
    # o with |V|: exp weights from the true scores, |V| rows
    out = np.zeros(q.shape[:2] + (512,))
    big = np.zeros(q.shape[:2] + (1,))
    t_count = q.shape[0]
    for t in range(t_count):
        rows = []
        for name, idx, ptr in (("swa", i0, p0), ("extra", kw.get("extra_indices"), kw.get("extra_indptr"))):
            if name not in absolute:
                continue
            k = absolute[name]
            for j in idx[ptr[t]:ptr[t + 1]]:
                if 0 <= j < len(k):
                    rows.append(k[j])
        if not rows:
            continue
        kr = np.array(rows)
        s = scale * (q[t].astype(np.float64) @ kr[:, :lay.d_qk].T)          # [H, n]
        mx = s.max(axis=1, keepdims=True)
        if "sink" in kw:
            mx = np.maximum(mx, kw["sink"][:q.shape[1], None].astype(np.float64))
        e = np.exp(s - mx)
        z = e.sum(axis=1, keepdims=True)
        if "sink" in kw:
            z = z + np.exp(kw["sink"][:q.shape[1], None].astype(np.float64) - mx)
        out[t] = (e / z) @ np.abs(kr[:, :512])
        big[t, :, 0] = scale * (np.abs(q[t].astype(np.float64)) @ np.abs(kr[:, :lay.d_qk]).T).max(axis=1)
    return out, big


def assert_close(o, lse, q, c0, i0, p0, kw, layout="v4", fp8=("ocp", "ocp"), scale=None, flashmla=False):
    scale = scale if scale is not None else mla.LAYOUTS[layout].d_qk ** -0.5
    ref, ref_lse = sparse_mla_reference(q, c0, i0, p0, scale=scale, layout=layout, fp8=fp8[0], extra_fp8=fp8[1],
                                           return_lse=True, **kw)
    o = np.asarray(o).astype(np.float64)
    wv, big = _weights_abs_v(q, c0, i0, p0, kw, layout, fp8, scale)
    # P's bf16 rounding and the output's, plus the scores' fp32 error: each s_j - m is off by at
    # most 2 gamma max_j scale sum |q k_j| (gamma = (d + 2) 2^-24), which moves o by that times
    # sum_j w_j |V_j - o|
    gamma = (mla.LAYOUTS[layout].d_qk + 2) * 2.0**-24
    bound = 1.05 * (2.0**-9 * (wv + np.abs(ref)) + 2 * gamma * big * (wv + np.abs(ref))) + 1e-30
    err = np.abs(o - ref)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), f"max err / bound {np.max(err / bound):.3f} at {worst}"
    if flashmla:    # FlashMLA's tolerance, for data like its tests' (it is not a worst-case bound)
        assert np.all(err <= 1e-3 + 2.01 / 128 * np.abs(ref))
    if lse is not None:
        lse = np.asarray(lse).astype(np.float64)
        fin = np.isfinite(ref_lse)
        assert np.array_equal(np.isfinite(lse), fin) and np.all(lse[~fin] == np.inf)
        assert np.all(np.abs(lse[fin] - ref_lse[fin]) <= 1e-6 + 8.01 / 65536 * np.abs(ref_lse[fin]))


def _run(arch, q, c0, i0, p0, kw, *, device=None, **options):
    with hipskinny.on_device(device or _device(arch)):
        return op.sparse_mla(q, c0, i0, p0, **kw, **options)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("fp8", [("ocp", "ocp"), ("fnuz", "ocp")], ids=["ocp", "fnuz+ocp"])
def test_v4_both_lists_sink_lse(arch, fp8):
    """H = 20 (the wide kernel: a full and a partial head tile, the rest skipped), T = 4 with
    lengths 0, 1, 33 and a few hundred in the SWA list (block size 61, padded stride) and 31, 32,
    0, 5 in the extra list (block size 2), a sink, -1, out-of-range and duplicate slots, indptr
    not starting at 0."""
    rng = np.random.default_rng(1)
    q, c0, i0, p0, kw = _case(rng, "v4", 4, 20, [0, 1, 33, 230], [31, 32, 0, 5], bs0=61, pad=48, fp8=fp8, sink=True)
    o, lse = _run(arch, q, c0, i0, p0, kw, scale=512**-0.5, fp8=fp8, return_lse=True)
    assert np.asarray(o).dtype == BF16 and np.asarray(o).shape == (4, 20, 512)
    assert_close(o, lse, q, c0, i0, p0, kw, "v4", fp8)


@pytest.mark.parametrize("arch", ARCHS)
def test_flashmla_tolerance(arch):
    """DSv4-like decode: 16 heads, 128 SWA rows and 384 compressed rows per token, standard normal
    rows, the model's scale and a sink, within FlashMLA's tolerance (and the derived bound)."""
    rng = np.random.default_rng(8)
    lay = mla.LAYOUTS["v4"]
    t, h = 2, 16
    c0 = mla.pack_cache(rng.standard_normal((300, lay.d_qk)), block_size=64)
    c1 = mla.pack_cache(rng.standard_normal((900, lay.d_qk)), block_size=64)
    i0 = rng.integers(0, 300, t * 128).astype(np.int32)
    i1 = rng.integers(0, 900, t * 384).astype(np.int32)
    kw = {"extra_cache": c1, "extra_indices": i1, "extra_indptr": np.arange(0, t * 384 + 1, 384, dtype=np.int32),
          "sink": rng.uniform(-1, 1, h).astype(np.float32)}
    p0 = np.arange(0, t * 128 + 1, 128, dtype=np.int32)
    q = rng.standard_normal((t, h, lay.d_qk)).astype(BF16)
    o, lse = _run(arch, q, c0, i0, p0, kw, scale=512**-0.5, return_lse=True)
    assert_close(o, lse, q, c0, i0, p0, kw, "v4", flashmla=True)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("fp8", ["ocp", "fnuz"])
def test_v32_one_list(arch, fp8):
    rng = np.random.default_rng(2)
    q, c0, i0, p0, kw = _case(rng, "v32", 3, 8, [64, 7, 100], bs0=64, fp8=(fp8, fp8))
    o, lse = _run(arch, q, c0, i0, p0, kw, scale=0.1352, layout="v32", fp8=fp8, return_lse=True)
    assert_close(o, lse, q, c0, i0, p0, kw, "v32", (fp8, fp8), scale=0.1352)


@pytest.mark.parametrize("arch", ARCHS)
def test_one_token_fnuz(arch):
    """T = 1 (plain decode), H = 8, both caches FNUZ (gfx942's converter decodes it; the other
    archs widen in software), 300 SWA rows and 33 extra rows, a sink, the LSE."""
    rng = np.random.default_rng(12)
    fp8 = ("fnuz", "fnuz")
    q, c0, i0, p0, kw = _case(rng, "v4", 1, 8, [300], [33], fp8=fp8, sink=True)
    o, lse = _run(arch, q, c0, i0, p0, kw, scale=512**-0.5, fp8="fnuz", return_lse=True)
    assert_close(o, lse, q, c0, i0, p0, kw, "v4", fp8)


@pytest.mark.parametrize("arch", ARCHS)
def test_one_head_and_mtp_rows(arch):
    """H = 1 (15 of the tile's 16 head rows unused and never written), T = 7 (MTP: each speculative
    row its own lists) with SWA lengths 31, 32, 33 and block size 2 for the extra list."""
    rng = np.random.default_rng(9)
    q, c0, i0, p0, kw = _case(rng, "v4", 7, 1, [31, 32, 33, 1, 0, 64, 2], [3, 0, 5, 2, 8, 1, 0], bs1=2)
    out = np.full((7, 1, 512), np.nan, BF16)
    o, lse = _run(arch, q, c0, i0, p0, kw, scale=0.07, return_lse=True, out=(out, None))
    assert o is out
    assert_close(o, lse, q, c0, i0, p0, kw, "v4", scale=0.07)


@pytest.mark.parametrize("arch", ARCHS)
def test_sink_edges_and_empty_lists(arch):
    """sigma = -inf: the no-sink bits; +inf: exact zeros; no valid slot: exact zeros, LSE +inf."""
    rng = np.random.default_rng(3)
    h = 4
    q, c0, i0, p0, kw = _case(rng, "v4", 3, h, [40, 0, 3], bs0=64)
    i0[p0[2]:p0[3]] = -1                     # token 2: every slot -1
    dev = _device(arch)
    plain, lse = _run(arch, q, c0, i0, p0, kw, device=dev, scale=0.05, return_lse=True)
    sink = np.array([-np.inf, np.inf, -np.inf, np.inf], np.float32)
    with_sink = _run(arch, q, c0, i0, p0, {"sink": sink}, device=dev, scale=0.05)
    plain, with_sink = np.asarray(plain), np.asarray(with_sink)
    assert np.array_equal(with_sink[:, 0::2].view(np.uint16), plain[:, 0::2].view(np.uint16))
    assert not np.any(with_sink[:, 1::2].view(np.uint16))          # +0.0 exactly
    assert not np.any(plain[1:].view(np.uint16))                     # empty and all -1: +0.0 exactly
    assert np.all(np.asarray(lse)[1:] == np.inf) and np.all(np.isfinite(np.asarray(lse)[0]))


@pytest.mark.parametrize("arch", ARCHS)
def test_split_counts_agree_and_are_deterministic(arch):
    """Forced splits 1, 3 and 16 each within the bound (every count: the next test); a split
    count's bits are the same across calls, CU counts and seeded wave schedules; the default
    choice is split_count's."""
    rng = np.random.default_rng(4)
    q, c0, i0, p0, kw = _case(rng, "v4", 2, 16, [300, 70], [40, 9], sink=True)
    for s in (1, 3, 16):
        o = _run(arch, q, c0, i0, p0, kw, scale=0.05, splits=s)
        assert_close(o, None, q, c0, i0, p0, kw, "v4", scale=0.05)
    base = np.asarray(_run(arch, q, c0, i0, p0, kw, scale=0.05, splits=4)).view(np.uint16)
    for dev in (_device(arch, cus=3), _device(arch, seed=11), _device(arch, cus=64, seed=5)):
        again = np.asarray(_run(arch, q, c0, i0, p0, kw, device=dev, scale=0.05, splits=4)).view(np.uint16)
        assert np.array_equal(again, base)
    capacity = len(i0) + len(kw["extra_indices"])
    info = op.plan_info(_device(arch), 2, 16, capacity)
    assert info["splits"] == op.split_count(2, 16, capacity) and info["grid"] == 2 * info["splits"]


def test_every_split_count_agrees():
    """Splits 1..16 over one token's 17 tiles (the chunking and the merge are the same code on
    every arch; the arch-specific parts run in the test above): each within the bound."""
    rng = np.random.default_rng(14)
    q, c0, i0, p0, kw = _case(rng, "v4", 1, 16, [500], [30], sink=True)
    dev = _device("gfx950")
    for s in range(1, op.MAX_SPLITS + 1):
        o = _run("gfx950", q, c0, i0, p0, kw, device=dev, scale=0.05, splits=s)
        assert_close(o, None, q, c0, i0, p0, kw, "v4", scale=0.05)


@pytest.mark.parametrize("arch", ARCHS)
def test_wide_head_groups(arch):
    """More than 16 heads take the wide kernel (64 heads per workgroup on gfx9, 32 on gfx11/gfx12):
    v32 with H = 72 (gfx9: a full group and one of 8 heads; gfx11/12: two full and one of 8, whose
    other head tiles are skipped) and 3 splits; v4 with H = 40, both lists, sink, LSE and 2 splits.
    Each within the bound, and the bits the same across CU counts and wave schedules."""
    rng = np.random.default_rng(21)
    q, c0, i0, p0, kw = _case(rng, "v32", 2, 72, [150, 61])
    o = _run(arch, q, c0, i0, p0, kw, scale=0.06, layout="v32", splits=3)
    assert_close(o, None, q, c0, i0, p0, kw, "v32", scale=0.06)
    info = op.plan_info(_device(arch), 2, 72, len(i0), "v32")
    heads = op.WIDE_HEADS[INFO[arch].wave_size]
    assert info["kernel"] == "sparse_mla_v32_wide"
    assert info["head_groups"] == -(-72 // heads) == (2 if heads == 64 else 3)
    q, c0, i0, p0, kw = _case(rng, "v4", 3, 40, [33, 0, 97], [5, 31, 2], fp8=("fnuz", "ocp"), sink=True)
    o, lse = _run(arch, q, c0, i0, p0, kw, scale=0.05, fp8=("fnuz", "ocp"), splits=2, return_lse=True)
    assert_close(o, lse, q, c0, i0, p0, kw, "v4", ("fnuz", "ocp"), scale=0.05)
    base = np.asarray(o).view(np.uint16)
    for dev in (_device(arch, cus=3), _device(arch, cus=64, seed=5)):
        again = _run(arch, q, c0, i0, p0, kw, device=dev, scale=0.05, fp8=("fnuz", "ocp"), splits=2)
        assert np.array_equal(np.asarray(again).view(np.uint16), base)
    assert op.plan_info(_device(arch), 3, 16, 200)["kernel"] == "sparse_mla_v4"   # 16 heads: one narrow group


def test_split_count_is_a_function_of_host_shapes():
    assert op.split_count(4, 16, 4 * 640) == 4         # DSv4 CSA, B = 4: 20 tiles per token
    assert op.split_count(4, 16, 4 * 136) == 1         # HCA: 5 tiles, 7 round trips (2 splits: 9)
    assert op.split_count(1, 128, 2048) == 8           # V3.2 top-2048: 64 tiles, 8 head groups
    assert op.group_heads(64, 128) == 64 and op.group_heads(32, 128) == 32 and op.group_heads(64, 16) == 16
    assert op.split_count(4, 128, 4 * 2048, 64) == 8   # V3.2 on gfx9: 2 groups of 64, 16 splits allowed
    assert op.split_count(64, 128, 64 * 2048) == 1     # 512 workgroups without splitting
    assert op.split_count(512, 16, 512 * 640) == 1     # enough workgroups already
    assert op.split_count(3, 1, 0) == 1


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_nan_in_a_valid_row_reaches_its_token_only(arch):
    rng = np.random.default_rng(5)
    q, c0, i0, p0, kw = _case(rng, "v4", 2, 3, [10, 10], bs0=64)
    slot = int(i0[p0[0] + 5])
    blk, off = divmod(slot, 64)
    raw = np.lib.stride_tricks.as_strided(c0, (c0.shape[0], c0.strides[0]), (c0.strides[0], 1), writeable=True)
    raw[blk, off * 576 + 17] = 0x7F                                  # OCP NaN in token 0's row
    assert slot not in set(i0[p0[1]:p0[2]].tolist())
    o = np.asarray(_run(arch, q, c0, i0, p0, kw, scale=0.05)).astype(np.float64)
    assert np.all(np.isnan(o[0])) and not np.any(np.isnan(o[1]))
    ref = sparse_mla_reference(q, c0, i0, p0, scale=0.05)
    assert np.all(np.isnan(ref[0]))


def test_bad_inputs():
    rng = np.random.default_rng(6)
    q, c0, i0, p0, kw = _case(rng, "v4", 2, 3, [5, 5])
    dev = _device("gfx1201")

    def call(**over):
        args = {"q": q, "swa_cache": c0, "swa_indices": i0, "swa_indptr": p0, "scale": 0.1, **over}
        with hipskinny.on_device(dev):
            return op.sparse_mla(**args)

    cases = [
        ({"q": q.astype(np.float16)}, InputTypeError, "q has dtype float16; it must be bfloat16"),
        ({"q": q[:, :, :500]}, InputValueError, "q must be [T, H, 512]"),
        ({"swa_cache": c0[:, :, :580]}, InputValueError, "swa_cache must be uint8 [num_blocks, block_size, 584]"),
        ({"swa_indptr": p0[:-1]}, InputValueError, "swa_indptr must be int32 [T + 1] = [3]"),
        ({"swa_indptr": p0.astype(np.int64)}, InputTypeError, "swa_indptr must be int32"),
        ({"swa_indices": i0.astype(np.int64)}, InputTypeError, "swa_indices must be a flat int32 array"),
        ({"swa_indices": i0.reshape(-1, 1)}, InputValueError, "swa_indices must be a flat int32 array"),
        ({"sink": np.zeros(2, np.float32)}, InputValueError, "sink must be float32 [>= H] = [>= 3]"),
        ({"sink": np.zeros(3, np.float64)}, InputValueError, "sink must be float32"),
        ({"scale": float("nan")}, InputValueError, "scale must be a finite float"),
        ({"scale": float("inf")}, InputValueError, "scale must be a finite float"),
        ({"layout": "v5"}, InputValueError, "layout 'v5'; supported: 'v4', 'v32'"),
        ({"fp8": "e5m2"}, InputValueError, "fp8 must be 'ocp' or 'fnuz', or a pair"),
        ({"extra_cache": c0}, InputValueError, "extra_cache, extra_indices and extra_indptr come together"),
        ({"splits": 17}, InputValueError, "splits must be an int in 1..16"),
        ({"layout": "v32", "q": np.zeros((2, 3, 576), BF16)}, InputValueError, "swa_cache must be uint8 "
         "[num_blocks, block_size, 656]"),
        ({"out": np.zeros((2, 3, 512), np.float32)}, InputValueError, "out must be a writable contiguous bfloat16"),
    ]
    for over, exc, message in cases:
        with pytest.raises(exc, match=None) as info:
            call(**over)
        assert message in str(info.value), (over.keys(), str(info.value))
    v32_cache = mla.pack_cache(np.zeros((4, 576)), layout="v32", block_size=4)
    with pytest.raises(InputValueError, match="'v32' has one list and no sink"):
        call(layout="v32", q=np.zeros((2, 3, 576), BF16), swa_cache=v32_cache, sink=np.zeros(3, np.float32))


def _in(container: str, a: np.ndarray, mode=None):
    """``a`` as the container a caller hands over: numpy, a torch CPU tensor, or a GPU-resident torch
    tensor (a fake one of `mode`, with a's shape and strides: its checks run without a device)."""
    if container == "numpy" or a is None:
        return a
    import torch

    if container == "torch-gpu":      # shape, strides and dtype are what the checks see
        dtype = torch.bfloat16 if a.dtype == BF16 else getattr(torch, a.dtype.name)
        with mode:
            return torch.empty_strided(a.shape, [st // a.itemsize for st in a.strides], dtype=dtype, device="cuda")
    host = np.ascontiguousarray(a)
    return torch.from_numpy(host.view(np.uint16)).view(torch.bfloat16) if a.dtype == BF16 else torch.from_numpy(host)


@pytest.mark.parametrize("container", ["numpy", "torch-cpu", "torch-gpu"])
@pytest.mark.parametrize("which", ["swa", "extra"])
@pytest.mark.parametrize("bad", ["short", "long", "empty", "2-d"])
def test_wrong_length_indptr_is_a_value_error_not_a_type_error(container, which, bad):
    """Issue 55: an int32 indptr that is not [T + 1] raised InputTypeError (a TypeError); its length is
    a value: InputValueError (a ValueError), same message, for numpy arrays, CPU tensors and GPU-resident
    tensors (checked on fake tensors, as torch.compile and a GPU call check them) alike, and in the
    reference. A wrong dtype stays an InputTypeError."""
    if container != "numpy":
        pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    q, c0, i0, p0, kw = _case(rng, "v4", 2, 3, [5, 5], [2, 3])
    lists = {"swa_cache": c0, "swa_indices": i0, "swa_indptr": p0, **kw}
    ptr = f"{which}_indptr"
    good = lists[ptr]
    bad_ptr = {"short": good[:-1], "long": np.append(good, good[-1]).astype(np.int32), "empty": good[:0],
               "2-d": good.reshape(-1, 1)}[bad]
    with pytest.raises(InputValueError, match=ptr):
        sparse_mla_reference(q, **dict(lists, **{ptr: bad_ptr}), scale=0.1)
    with pytest.raises(InputTypeError, match=ptr):
        sparse_mla_reference(q, **dict(lists, **{ptr: good.astype(np.float32)}), scale=0.1)

    def call(**over):
        args = {k: over.get(k, v) for k, v in lists.items()}
        if container != "torch-gpu":
            with hipskinny.on_device(_device("gfx942")):
                return op.sparse_mla(_in(container, q), **{k: _in(container, v) for k, v in args.items()},
                                        scale=0.1)
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        hipskinny.torch_ops.register()   # idempotent; the import hook misses torch after transformers' find_spec
        mode = FakeTensorMode()
        with mode:
            return torch.ops.hipskinny.sparse_mla_decode(_in(container, q, mode), *(
                _in(container, args.get(n), mode) for n in op.INPUTS[1:7]), scale=0.1)

    with pytest.raises(InputValueError) as info:
        call(**{ptr: bad_ptr})
    assert not isinstance(info.value, TypeError)
    assert str(info.value) == f"sparse_mla: {ptr} must be int32 [T + 1] = [3]; got int32 {bad_ptr.shape}"
    with pytest.raises(InputTypeError, match=re.escape(f"sparse_mla: {ptr} must be int32 [T + 1] = [3]; got int64")):
        call(**{ptr: good.astype(np.int64)})


@pytest.mark.parametrize(("which", "indptr", "rule"), [
    ("swa", [-4, 2], "swa_indptr must start at 0 or more; got swa_indptr[0] = -4"),
    ("swa", [0, 5], "swa_indptr must end at most at len(swa_indices) = 4; got swa_indptr[1] = 5"),
    ("swa", [0, 3, 1], "swa_indptr must never decrease; got swa_indptr[1] = 3 > swa_indptr[2] = 1"),
    ("extra", [0, 2, 9], "extra_indptr must end at most at len(extra_indices) = 4; got extra_indptr[2] = 9"),
    ("extra", [-1, 0, 4], "extra_indptr must start at 0 or more"),
], ids=["starts-below-0", "ends-past-indices", "decreases", "extra-ends-past", "extra-starts-below-0"])
def test_host_lists_that_leave_their_buffers_are_refused_before_any_launch(which, indptr, rule):
    """The issue's cases (indptr [-4, 2] read before the index buffer; [0, 5] with 4 indices was accepted):
    host lists are checked on every call, before anything is launched, and the reference agrees."""
    rng = np.random.default_rng(8)
    t = len(indptr) - 1
    q, c0, _, _, kw = _case(rng, "v4", t, 3, [4] * t, [2] * t)
    idx = np.int32([0, 1, 2, 3])
    good = np.int32(np.linspace(0, 4, t + 1).astype(int))
    lists = {"swa_indices": idx, "swa_indptr": good, "extra_indices": idx, "extra_indptr": good}
    lists[f"{which}_indptr"] = np.int32(indptr)
    dev = _device("gfx942")
    with hipskinny.on_device(dev):
        op.sparse_mla(q, c0, idx, good, extra_cache=kw["extra_cache"], extra_indices=idx, extra_indptr=good,
                         scale=0.1)          # a good call first: the same signature is then bound
        launches = list(dev.launches)
        assert launches, "the good call ran"
        with pytest.raises(InputValueError, match=re.escape(rule)):
            op.sparse_mla(q, c0, lists["swa_indices"], lists["swa_indptr"], extra_cache=kw["extra_cache"],
                             extra_indices=lists["extra_indices"], extra_indptr=lists["extra_indptr"], scale=0.1)
        assert list(dev.launches) == launches
    with pytest.raises(ValueError):
        sparse_mla_reference(q, c0, lists["swa_indices"], lists["swa_indptr"], extra_cache=kw["extra_cache"],
                                extra_indices=lists["extra_indices"], extra_indptr=lists["extra_indptr"], scale=0.1)


def test_out_in_place_and_empty_batch():
    rng = np.random.default_rng(7)
    q, c0, i0, p0, kw = _case(rng, "v4", 2, 3, [12, 4])
    out = np.full((2, 3, 512), 7, BF16)
    got = _run("gfx1201", q, c0, i0, p0, kw, scale=0.1, out=out)
    assert got is out
    assert_close(out, None, q, c0, i0, p0, kw, "v4", scale=0.1)
    empty = _run("gfx1201", q[:0], c0, i0[:0], np.zeros(1, np.int32), {}, scale=0.1)
    assert np.asarray(empty).shape == (0, 3, 512)


def _prefetch_overlaps(body, rounds: int) -> bool:
    """Some barrier is followed by >= rounds 16-byte global loads, then matrix instructions and the
    next barrier, with no wait for loads in between: the loads stay in flight across QK and the
    barrier that ends it (a full __syncthreads would wait for them there)."""
    for i, x in enumerate(body):
        if "barrier" not in x.mnemonic:
            continue
        loads, matrix = 0, False
        for y in body[i + 1:]:
            if _vm_wait(y):
                break
            if "barrier" in y.mnemonic:
                if matrix and loads >= rounds:
                    return True
                break
            if y.mnemonic in ("global_load_dwordx4", "global_load_b128"):
                loads += 1
            elif y.mnemonic.startswith(("v_mfma", "v_wmma")):
                matrix = True
    return False


def _vm_wait(inst) -> bool:
    """An instruction that waits for vector-memory loads (gfx9/gfx11 vmcnt, gfx12 loadcnt)."""
    return ((inst.mnemonic == "s_waitcnt" and any("vmcnt" in o for o in inst.operands))
            or inst.mnemonic.startswith("s_wait_loadcnt"))


@pytest.mark.parametrize("arch", ARCHS)
def test_gather_loads_overlap_the_matrix_work(arch):
    """The double buffer in the code objects: the next tile's 16-byte chunk loads (one per round)
    are in flight across QK and its barrier (`_prefetch_overlaps`); and no flat loads (they would
    count against the LDS waits too)."""
    from benchmarks.static import kernel_bodies

    _, kernels = kernel_bodies(arch, "sparse_mla")
    for kern, body in kernels:
        # Chunks<V32, threads>::kRounds: rows per round = threads / (FP8 chunks + 8 rope chunks)
        nope = 32 if "v32" in kern.name else 28
        rounds = -(-op.ROWS // (kern.max_flat_workgroup_size // (nope + 8)))
        assert not any(m.startswith("flat_") for m in body.mnemonics), kern.name
        assert _prefetch_overlaps(body.insts(), rounds), f"{arch} {kern.name}: no loads in flight across QK"


def test_code_object_resources():
    """Every kernel on every arch: no spills, no scratch, static LDS within the arch's workgroup limit;
    the wide kernels at two waves per SIMD (gfx9: 512 threads) or more."""
    from hipskinny import registry
    from hipskinny.arch import ARCHS as INFO

    entries = registry.manifest()["code_objects"]
    for arch in ARCHS:
        kernels = {k["name"]: k for k in entries[f"{arch}/sparse_mla"]["kernels"]}
        assert set(kernels) == {"sparse_mla_v4", "sparse_mla_v32", "sparse_mla_v4_wide", "sparse_mla_v32_wide"}
        assert all(kernels[f"sparse_mla_{lay}_wide"]["occupancy"] >= 2 for lay in ("v4", "v32"))
        for k in kernels.values():
            assert k["vgpr_spill_count"] == k["sgpr_spill_count"] == k["private_segment_fixed_size"] == 0
            assert 0 < k["group_segment_fixed_size"] <= INFO[arch].lds_per_workgroup
