"""hipskinny.mla cache tools (layouts, pack, dequantize) and the float64 sparse MLA decode reference,
held against byte-level reads, ml_dtypes casts and a per-(token, head) loop of their own."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from hipskinny import InputTypeError, InputValueError, mla
from hipskinny.ops.sparse_mla import sparse_mla_reference as ref

BF16 = np.dtype(ml_dtypes.bfloat16)
NP8 = {"ocp": np.dtype(ml_dtypes.float8_e4m3fn), "fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz)}
EMIN = {"ocp": -6, "fnuz": -7}          # smallest normal exponent of e4m3 / e4m3fnuz
FMAX = {"ocp": 448.0, "fnuz": 240.0}
SCALE = 512**-0.5
CASES = [(lay, fl) for lay in ("v4", "v32") for fl in ("ocp", "fnuz")]


def _rows(rng, n, lay):
    """bf16 rows whose tiles span many magnitudes, with an all-zero tile and a lone spike."""
    lay = mla.LAYOUTS[lay]
    mag = np.exp2(rng.integers(-30, 12, (n, lay.d_qk // lay.tile + 1))).repeat(lay.tile, axis=1)[:, :lay.d_qk]
    x = rng.standard_normal((n, lay.d_qk)) * mag
    x[0, :lay.tile] = 0.0
    x[1, lay.tile + 5] = 3.0e4
    return x.astype(BF16)


def _flat(cache):
    """The whole [num_blocks, block_stride] buffer behind a pack_cache view (padding included)."""
    return np.lib.stride_tricks.as_strided(cache, (cache.shape[0], cache.strides[0]), (cache.strides[0], 1))


def _pow2_scale(amax, fmax):
    """Smallest power of two >= max(amax / fmax, 1e-4), by counting."""
    k = -20
    while 2.0**k < 1e-4 or fmax * 2.0**k < amax:
        k += 1
    return k


def test_block_bytes_match_spec():
    assert [mla.block_bytes("v4", b) for b in (64, 2, 256)] == [37440, 1728, 149760]
    assert mla.block_bytes("v32", 64) == 64 * 656
    assert (mla.token_bytes("v4"), mla.token_bytes("v32")) == (584, 656)
    v4, v32 = mla.LAYOUTS["v4"], mla.LAYOUTS["v32"]
    assert (v4.d_qk, v4.d_v, v4.nope, v4.rope, v4.tiles) == (512, 512, 448, 64, 7)
    assert (v32.d_qk, v32.d_v, v32.nope, v32.rope, v32.tiles) == (576, 512, 512, 64, 4)
    c = mla.pack_cache(np.zeros((1, 512), np.float32), block_size=64)
    assert c.shape == (1, 64, 584) and c.strides == (37440, 584, 1)


def test_bf16_round():
    rng = np.random.default_rng(0)
    hi = rng.integers(0, 2**16, 20000).astype(np.uint32)        # every sign, exponent and bf16 mantissa
    lo = rng.choice([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], 20000).astype(np.uint32)   # ties and neighbours
    f32 = ((hi << 16) | lo).view(np.float32)
    f32 = f32[~np.isnan(f32)]
    want = f32.astype(BF16).astype(np.float64)  # ml_dtypes from float32: one correct rounding
    assert np.array_equal(mla.bf16_round(f32), want)
    # from float64 directly: a float32 detour would round 1 + 2**-8 + 2**-40 to a tie, then down to 1
    top = 2.0**127 * (2 - 2**-7)                # bf16 max; max + half an ulp is a tie that overflows
    vals = [1 + 2**-8 + 2**-40, 1 + 2**-8, -(2.0**-134), top + 2**119 - 2**90, top + 2**119]
    assert mla.bf16_round(vals).tolist() == [1 + 2**-7, 1.0, -0.0, top, math.inf]


@pytest.mark.parametrize("lay,fl", CASES)
def test_pack_bytes_and_round_trip(lay, fl):
    rng = np.random.default_rng(1)
    L, bs, n = mla.LAYOUTS[lay], 3, 8
    k = _rows(rng, n, lay)
    x = k.astype(np.float64)
    cache = mla.pack_cache(k, layout=lay, block_size=bs, fp8=fl)
    flat = _flat(cache)
    assert cache.shape == (3, bs, L.token_bytes) and cache.strides == (mla.block_bytes(lay, bs), L.token_bytes, 1)
    for r in range(n):
        b, p = divmod(r, bs)
        rec = flat[b, p * L.data_bytes:(p + 1) * L.data_bytes]
        if lay == "v4":
            scales = np.exp2(flat[b, bs * 576 + 8 * p:bs * 576 + 8 * p + 7].astype(float) - 127)
        else:
            scales = rec[512:528].view("<f4").astype(float)
        want = [2.0 ** _pow2_scale(np.abs(x[r, i * L.tile:(i + 1) * L.tile]).max(), FMAX[fl]) for i in range(L.tiles)]
        assert scales.tolist() == want
        q = x[r, :L.nope] / np.repeat(scales, L.tile)
        assert np.array_equal(rec[:L.nope], q.astype(np.float32).astype(NP8[fl]).view(np.uint8))
        assert np.array_equal(rec[L.rope_offset:L.rope_offset + 128], k[r, L.nope:].view("<u2").view(np.uint8))
    deq = mla.dequantize_cache(cache, layout=lay, fp8=fl)[:n]
    exact = mla.dequantize_cache(cache, layout=lay, fp8=fl, round_bf16=False)[:n]
    assert np.array_equal(deq, exact)           # fp8 * 2**k is a bf16 value: no rounding left
    assert np.array_equal(deq[:, L.nope:], x[:, L.nope:])
    # per element: the scale times half the fp8 step at |x / scale| (the binade's, or the subnormal one)
    s = np.repeat(np.stack([[2.0 ** _pow2_scale(np.abs(x[r, i * L.tile:(i + 1) * L.tile]).max(), FMAX[fl])
                             for i in range(L.tiles)] for r in range(n)]), L.tile, axis=1)
    _, e = np.frexp(x[:, :L.nope] / s)
    assert np.all(np.abs(deq[:, :L.nope] - x[:, :L.nope]) <= s * np.ldexp(0.5, np.maximum(e - 1, EMIN[fl]) - 3))


@pytest.mark.parametrize("lay,fl", CASES)
def test_slots_garbage_and_padded_stride(lay, fl):
    rng = np.random.default_rng(2)
    L, bs = mla.LAYOUTS[lay], 4
    k = _rows(rng, 6, lay)
    slots = np.array([13, 2, 7, 0, 14, 9])
    stride = mla.block_bytes(lay, bs) + 48
    junk = mla.pack_cache(k, layout=lay, block_size=bs, fp8=fl, slots=slots, num_blocks=5, block_stride=stride,
                          rng=rng)
    clean = mla.pack_cache(k, layout=lay, block_size=bs, fp8=fl)
    assert junk.shape == (5, bs, L.token_bytes) and junk.strides == (stride, L.token_bytes, 1)
    a = mla.dequantize_cache(junk, layout=lay, fp8=fl)
    assert np.array_equal(a[slots], mla.dequantize_cache(clean, layout=lay, fp8=fl)[:6])
    others = np.setdiff1d(np.arange(5 * bs), slots)
    assert not np.array_equal(np.nan_to_num(a[others]), np.zeros_like(a[others]))   # garbage is there
    # the same bytes read as a raw [num_blocks, block_stride] buffer, or as a contiguous copy
    raw = mla.dequantize_cache(_flat(junk), layout=lay, fp8=fl, block_size=bs)
    assert np.array_equal(raw, a, equal_nan=True)
    assert np.array_equal(mla.dequantize_cache(np.ascontiguousarray(junk), layout=lay, fp8=fl), a, equal_nan=True)
    for bad in (stride + 8, mla.block_bytes(lay, bs) - 16):
        with pytest.raises(InputValueError, match="block_stride"):
            mla.pack_cache(k, layout=lay, block_size=bs, fp8=fl, block_stride=bad)


def test_exponent_bytes_0_and_255():
    k = np.ones((2, 512), np.float32)
    cache = mla.pack_cache(k, block_size=2)
    flat = _flat(cache)
    assert flat[0, 2 * 576] == 127 - 8          # 1.0 / 448 -> scale 2**-8
    flat[0, 2 * 576 + 0] = 0                    # token 0, tile 0
    flat[0, 2 * 576 + 8 + 1] = 255              # token 1, tile 1
    d = mla.dequantize_cache(cache, round_bf16=False)
    assert np.array_equal(d[0, :64], np.full(64, 256.0 * 2.0**-127))
    assert np.isnan(d[1, 64:128]).all() and not np.isnan(d[1, :64]).any() and not np.isnan(d[0, 64:]).any()


def _loop(q, lists, sink, scale):
    """Spec section 2 literally, one (token, head) at a time; lists: (all rows, indices, indptr)."""
    t_count, h_count = q.shape[:2]
    o, lse = np.zeros((t_count, h_count, 512)), np.full((t_count, h_count), np.inf)
    for t in range(t_count):
        for h in range(h_count):
            sv = [(scale * float(np.dot(q[t, h], K[s])), K[s, :512]) for K, idx, ptr in lists
                  for s in idx[ptr[t]:ptr[t + 1]] if 0 <= s < len(K)]
            if not sv:
                continue
            m = max(s for s, _ in sv)
            lse[t, h] = m + math.log(sum(math.exp(s - m) for s, _ in sv))
            sig = -math.inf if sink is None else float(sink[h])
            if sig == math.inf:
                continue
            big = max(m, sig)
            z = sum(math.exp(s - big) for s, _ in sv) + math.exp(sig - big)
            o[t, h] = sum(math.exp(s - big) * v for s, v in sv) / z
    return o, lse


def _case(rng, lay="v4", fl="ocp", xfl="fnuz"):
    """T=3, H=5, an SWA cache (3 blocks of 4) and an extra cache (4 blocks of 2) with garbage in every
    unwritten slot; lists with -1, out-of-range and repeated slots, indptr from 7, token 1 keyless."""
    L = mla.LAYOUTS[lay]
    q = (rng.standard_normal((3, 5, L.d_qk)) * 2).astype(BF16)
    swa_slots = np.array([0, 3, 5, 6, 9, 10])
    swa = mla.pack_cache(rng.standard_normal((6, L.d_qk)).astype(BF16), layout=lay, block_size=4, fp8=fl,
                         slots=swa_slots, num_blocks=3, rng=rng)
    junk = [1, 2, 4, 7, 8, 11, 1]               # garbage slots, outside every token's range
    sidx = np.array(junk + [0, -1, 9, 9, 12, 3] + [] + [10, -1, 99999, 6] + [2, 2], np.int32)
    sptr = np.array([7, 13, 13, 17], np.int32)
    args = dict(swa_cache=swa, swa_indices=sidx, swa_indptr=sptr)
    if lay == "v4":
        extra = mla.pack_cache(rng.standard_normal((4, 512)).astype(BF16), block_size=2, fp8=xfl,
                               slots=[1, 2, 4, 7], num_blocks=4, rng=rng)
        args.update(extra_cache=extra, extra_indices=np.array([4, -1, -1, 8, 1, 7, 1], np.int32),
                    extra_indptr=np.array([0, 2, 4, 7], np.int32))
    return q, args


def _lists(args, lay="v4", fl="ocp", xfl="fnuz"):
    out = [(mla.dequantize_cache(args["swa_cache"], layout=lay, fp8=fl), args["swa_indices"], args["swa_indptr"])]
    if "extra_cache" in args:
        out.append((mla.dequantize_cache(args["extra_cache"], fp8=xfl), args["extra_indices"], args["extra_indptr"]))
    return out


def _close(a, b, ulps=16):
    """Equal up to a few float64 ulps of the largest magnitude involved (values are weighted sums)."""
    return np.all(np.abs(a - b) <= ulps * np.spacing(max(np.abs(a).max(), 1.0)))


def test_reference_matches_loop_v4_sink_and_extra():
    rng = np.random.default_rng(3)
    q, args = _case(rng)
    sink = np.array([0.5, -np.inf, np.inf, 3.0, -1.0, 9.9], np.float32)
    o, lse = ref(q, **args, sink=sink, scale=SCALE, fp8="ocp", extra_fp8="fnuz", return_lse=True)
    o2, lse2 = _loop(q.astype(np.float64), _lists(args), sink, SCALE)
    assert o.shape == (3, 5, 512) and o.dtype == np.float64 and lse.shape == (3, 5)
    assert np.isfinite(o).all() and _close(o, o2) and np.allclose(lse, lse2, rtol=1e-14, atol=0)
    assert np.array_equal(o[1], np.zeros((5, 512))) and np.isinf(lse[1]).all()      # token 1: no valid key
    assert np.array_equal(o[:, 2], np.zeros((3, 512))) and not np.signbit(o[:, 2]).any()   # sink +inf
    # the mixed-flavour trap: reading the FNUZ extra cache as OCP changes the result
    assert not np.allclose(ref(q, **args, sink=sink, scale=SCALE), o)


def test_reference_matches_loop_v32():
    rng = np.random.default_rng(4)
    q, args = _case(rng, "v32", "fnuz")
    o, lse = ref(q, **args, scale=0.135, layout="v32", fp8="fnuz", return_lse=True)
    o2, lse2 = _loop(q.astype(np.float64), _lists(args, "v32", "fnuz"), None, 0.135)
    assert _close(o, o2) and np.allclose(lse, lse2, rtol=1e-14, atol=0)
    assert np.isinf(lse[1]).all() and not np.isinf(lse[[0, 2]]).any()


def test_sink_edges_and_empty_rows():
    rng = np.random.default_rng(5)
    q, args = _case(rng)
    base, lse = ref(q, **args, scale=SCALE, extra_fp8="fnuz", return_lse=True)
    h = q.shape[1]
    assert np.array_equal(ref(q, **args, sink=np.full(h, -np.inf, np.float32), scale=SCALE, extra_fp8="fnuz"), base)
    plus = ref(q, **args, sink=np.full(h, np.inf, np.float32), scale=SCALE, extra_fp8="fnuz")
    assert np.array_equal(plus, np.zeros_like(plus)) and not np.signbit(plus).any()
    # LSE: logsumexp of the valid scores, sink or not
    _, lse_s = ref(q, **args, sink=np.full(h, 2.0, np.float32), scale=SCALE, extra_fp8="fnuz", return_lse=True)
    assert np.array_equal(lse_s, lse)
    dead = dict(args, swa_indices=np.full(20, -1, np.int32), extra_indices=np.array([99] * 7, np.int32))
    for sink in (None, np.zeros(h, np.float32)):
        o, l2 = ref(q, **dead, sink=sink, scale=SCALE, extra_fp8="fnuz", return_lse=True)
        assert np.array_equal(o, np.zeros_like(o)) and not np.signbit(o).any() and np.all(l2 == np.inf)


def test_order_independence():
    rng = np.random.default_rng(6)
    cache = mla.pack_cache(rng.standard_normal((64, 512)).astype(BF16), block_size=16)
    q = (rng.standard_normal((1, 4, 512)) * 3).astype(BF16)
    entries = rng.integers(-1, 70, 90).astype(np.int32)          # -1, out-of-range, repeats
    sink = np.array([0.0, 1.0, -2.0, 5.0], np.float32)

    def run(e, cut):
        return ref(q, cache, e[:cut], np.array([0, cut], np.int32), extra_cache=cache, extra_indices=e[cut:],
                   extra_indptr=np.array([0, len(e) - cut], np.int32), sink=sink, scale=SCALE)

    a = run(entries, 40)
    for cut in (0, 25, 90):
        assert _close(run(rng.permutation(entries), cut), a, ulps=8)


def test_nan_in_listed_row_propagates_unlisted_never_read():
    rng = np.random.default_rng(7)
    q, args = _case(rng)
    swa = args["swa_cache"].copy()          # contiguous copy: the same bytes, read the same way
    flat = swa.reshape(3, -1)
    flat[2, 1 * 576 + 10] = 0x7F             # slot 9 = block 2, token 1: an OCP NaN nope byte
    o = ref(q, **dict(args, swa_cache=swa), scale=SCALE, extra_fp8="fnuz")
    assert np.isnan(o[0]).all() and not np.isnan(o[[1, 2]]).any()     # only token 0 lists slot 9
    flat[2, 3 * 576 + 10] = 0x7F             # slot 11: listed by nobody
    flat[2, 1 * 576 + 10] = args["swa_cache"].reshape(3, -1)[2, 1 * 576 + 10]
    assert np.array_equal(ref(q, **dict(args, swa_cache=swa), scale=SCALE, extra_fp8="fnuz"),
                          ref(q, **args, scale=SCALE, extra_fp8="fnuz"))


def test_bad_arguments():
    rng = np.random.default_rng(8)
    q, args = _case(rng)
    k = np.zeros((2, 512), np.float32)
    bad_calls = [
        (InputValueError, "layout", lambda: mla.pack_cache(k, layout="v5", block_size=2)),
        (InputValueError, "fp8", lambda: mla.pack_cache(k, fp8="e5m2", block_size=2)),
        (InputValueError, "k must be", lambda: mla.pack_cache(np.zeros((2, 576)), block_size=2)),
        (InputTypeError, "k must be", lambda: mla.pack_cache(k.astype(np.int32), block_size=2)),
        (InputValueError, "slots", lambda: mla.pack_cache(k, block_size=2, slots=[3, 3])),
        (InputValueError, "num_blocks", lambda: mla.pack_cache(k, block_size=2, slots=[0, 9], num_blocks=2)),
        (InputTypeError, "block_size", lambda: mla.pack_cache(k, block_size=2.0)),
        (InputValueError, "block_size", lambda: mla.dequantize_cache(np.zeros((2, 2000), np.uint8))),
        (InputValueError, "cache must be", lambda: mla.dequantize_cache(np.zeros((2, 2, 656), np.uint8))),
        (InputTypeError, "q must be", lambda: ref(q.astype(np.int16), **args, scale=SCALE)),
        (InputValueError, "q must be", lambda: ref(q[..., :500], **args, scale=SCALE)),
        (InputValueError, "swa_indptr", lambda: ref(q, **dict(args, swa_indptr=args["swa_indptr"][:3]), scale=SCALE)),
        (InputValueError, "swa_indptr", lambda: ref(q, **dict(args, swa_indptr=np.array([7, 5, 13, 17])),
                                                    scale=SCALE)),
        (InputValueError, "extra_indptr", lambda: ref(q, **dict(args, extra_indptr=np.array([0, 2, 4, 99])),
                                                      scale=SCALE)),
        (InputTypeError, "extra_indices", lambda: ref(q, **dict(args, extra_indices=np.zeros(7)), scale=SCALE)),
        (InputValueError, "extra_cache", lambda: ref(q, **dict(args, extra_cache=None), scale=SCALE)),
        (InputValueError, "sink", lambda: ref(q, **args, sink=np.zeros(4, np.float32), scale=SCALE)),
        (InputTypeError, "sink", lambda: ref(q, **args, sink=np.zeros(5, np.int32), scale=SCALE)),
        (InputTypeError, "scale", lambda: ref(q, **args, scale=None)),
        (InputValueError, "extra_fp8", lambda: ref(q, **args, scale=SCALE, extra_fp8="bf8")),
        (InputValueError, "swa_cache", lambda: ref(q, **dict(args, swa_cache=args["swa_cache"][..., :580]),
                                                   scale=SCALE)),
    ]
    for exc, pattern, call in bad_calls:
        with pytest.raises(exc, match=pattern):
            call()
    q32, a32 = _case(rng, "v32", "ocp")
    with pytest.raises(InputValueError, match="sink"):
        ref(q32, **a32, sink=np.zeros(5, np.float32), scale=SCALE, layout="v32")
    with pytest.raises(InputValueError, match="extra_cache"):
        ref(q32, **a32, extra_cache=args["extra_cache"], extra_indices=args["extra_indices"],
            extra_indptr=args["extra_indptr"], scale=SCALE, layout="v32")
