"""hipskinny.w4a16.prepare: AWQ / GPTQ int4 checkpoints repacked into the kernels' [M, K/8] layout, held
against the spec's example words (/work/shared/reference/quant_specs.md section 2), the spec's dequant
formula (dequantize_checkpoint) and the integer codes the checkpoints were built from. All numpy."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from hipskinny import InputTypeError, InputValueError, w4a16

BF16 = np.dtype(ml_dtypes.bfloat16)
M, K = 48, 256
# quant_specs.md 2.2 / 2.3, typed in again here (not imported from the module under test)
SPEC_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _u32(word):
    """A 32-bit pattern as the int32 a checkpoint stores."""
    return np.array(word, np.uint32).view(np.int32)


def _decode_prepared(words):
    """Codes [.., M, K] from prepared words [.., M, K/8]: nibble i holds k = 8j + SPEC_ORDER[i]."""
    out = np.empty(words.shape + (8,), np.int64)
    for i, k in enumerate(SPEC_ORDER):
        out[..., k] = (words.astype(np.int64) >> (4 * i)) & 15
    return out.reshape(words.shape[:-1] + (-1,))


def _truth(codes, zeros, scales, g_idx, g):
    """The spec's W[m, k] = s[m, g(k)] * (q[m, k] - z[m, g(k)]) in float64, from the integer codes."""
    plain = codes.ndim == 2
    if plain:
        codes, scales = codes[None], scales[None]
        zeros = None if zeros is None else zeros[None]
        g_idx = None if g_idx is None else g_idx[None]
    zeros = np.full(scales.shape, 8) if zeros is None else zeros
    k = codes.shape[-1]
    out = np.empty(codes.shape, np.float64)
    for e in range(codes.shape[0]):
        gi = np.arange(k) // g if g_idx is None else g_idx[e]
        out[e] = scales[e].astype(np.float64)[:, gi] * (codes[e] - zeros[e][:, gi])
    return out[0] if plain else out


def _case(fmt, zero_mode, group_size, act_order=False, experts=None, seed=0, scale_dtype=np.float16, m=M, k=K):
    """(checkpoint dict, codes, true zeros or None, scales, g_idx or None) from random integer codes."""
    rng = np.random.default_rng(seed)
    lead = () if experts is None else (experts,)
    g = k if group_size == -1 else group_size
    codes = rng.integers(0, 16, lead + (m, k))
    scales = (rng.standard_normal(lead + (m, k // g)) * 0.01).astype(scale_dtype)
    zeros = None
    if zero_mode == "asym":
        lo = 1 if fmt == "gptq" else 0                 # v1 stores z - 1: true zero points 1..16
        zeros = rng.integers(lo, lo + 16, lead + (m, k // g))
        zeros[..., 0, 0] = lo + 15                     # include v1's z = 16, and never all 8
    elif zero_mode == "sym8":
        zeros = np.full(lead + (m, k // g), 8)
    g_idx = None
    if act_order:
        groups = np.arange(k) // g
        g_idx = np.stack([rng.permutation(groups) for _ in range(experts or 1)]).astype(np.int32)
        g_idx = g_idx if experts else g_idx[0]
    ckpt = w4a16.pack_checkpoint(codes, zeros, scales, fmt=fmt, group_size=group_size, g_idx=g_idx)
    return ckpt, codes, zeros, scales, g_idx


# ----------------------------------------------------------------------------------------------
# the spec's example words


def test_spec_gptq_word_unpacks_sequentially_along_k():
    # quant_specs.md 2.1: k = 0..7 holding 0..7 -> 0x76543210 (column n = 0 of the checkpoint)
    qweight = np.zeros((1, 8), np.int32)
    qweight[0, 0] = _u32(0x76543210)
    scales = np.ones((1, 8), np.float16)
    w = w4a16.dequantize_checkpoint(qweight, scales, np.zeros((1, 1), np.int32), fmt="gptq_v2", group_size=-1)
    assert w.shape == (8, 8) and w[0].tolist() == list(range(8)) and not w[1:].any()
    p = w4a16.prepare(qweight, scales, np.zeros((1, 1), np.int32), fmt="gptq_v2", group_size=-1)
    assert np.array_equal(w4a16.unprepare(p, np.float32), w.astype(np.float32))
    codes = np.zeros((8, 8), np.int64)
    codes[0] = np.arange(8)
    packed = w4a16.pack_checkpoint(codes, np.zeros((8, 1)), scales.T, fmt="gptq_v2", group_size=-1)
    assert packed["qweight"].dtype == np.int32 and packed["qweight"][0, 0] == _u32(0x76543210)


def test_spec_awq_word_unpacks_with_the_awq_interleave():
    # quant_specs.md 2.2: columns 0..7 holding 0..7 -> 0x75316420 (row k = 0 of the checkpoint)
    qweight = np.zeros((8, 1), np.int32)
    qweight[0, 0] = _u32(0x75316420)
    scales = np.ones((1, 8), np.float16)
    w = w4a16.dequantize_checkpoint(qweight, scales, np.zeros((1, 1), np.int32), fmt="awq", group_size=-1)
    assert w[:, 0].tolist() == list(range(8)) and not w[:, 1:].any()       # W [M, K]: column k = 0
    p = w4a16.prepare(qweight, scales, np.zeros((1, 1), np.int32), fmt="awq", group_size=-1)
    assert np.array_equal(w4a16.unprepare(p, np.float32), w.astype(np.float32))
    codes = np.zeros((8, 8), np.int64)
    codes[:, 0] = np.arange(8)
    packed = w4a16.pack_checkpoint(codes, np.zeros((8, 1)), scales.T, fmt="awq", group_size=-1)
    assert packed["qweight"][0, 0] == _u32(0x75316420)


@pytest.mark.parametrize("fmt", w4a16.FORMATS)
def test_prepared_word_is_the_exllama_shuffle(fmt):
    codes = np.random.default_rng(1).integers(0, 16, (8, 16))
    codes[3, 8:16] = np.arange(8)                           # row m = 3, k = 8..15 hold 0..7
    ckpt = w4a16.pack_checkpoint(codes, None, np.ones((8, 1), np.float16), fmt=fmt, group_size=-1)
    p = w4a16.prepare(**ckpt, fmt=fmt, group_size=-1)
    assert p.qweight.dtype == np.uint32 and p.qweight.shape == (8, 2)
    assert p.qweight[3, 1] == 0x75316420
    for m in range(8):
        for j in range(2):
            k = codes[m, 8 * j: 8 * j + 8].tolist()
            want = k[0] | k[2] << 4 | k[4] << 8 | k[6] << 12 | k[1] << 16 | k[3] << 20 | k[5] << 24 | k[7] << 28
            assert int(p.qweight[m, j]) == want


# ----------------------------------------------------------------------------------------------
# round trips


CASES = [(fmt, zm, g, act, e)
         for fmt in w4a16.FORMATS for zm in ("asym", "sym8", "none") for g in (32, 64, 128, -1)
         for act in (False, True) for e in (None, 3)
         if not (fmt == "awq" and (act or zm == "none"))]        # AWQ: no g_idx, zero points always stored


@pytest.mark.parametrize("fmt,zero_mode,group_size,act_order,experts", CASES)
def test_round_trip_matches_the_checkpoint(fmt, zero_mode, group_size, act_order, experts):
    ckpt, codes, zeros, scales, g_idx = _case(fmt, zero_mode, group_size, act_order, experts)
    assert (ckpt["qzeros"] is None) == (zero_mode == "none")
    p = w4a16.prepare(**ckpt, fmt=fmt, group_size=group_size)
    g = K if group_size == -1 else group_size
    lead = () if experts is None else (experts,)

    assert (p.shape, p.group_size, p.fmt, p.experts) == ((M, K), g, fmt, experts)
    assert p.qweight.dtype == np.uint32 and p.qweight.shape == lead + (M, K // 8)
    assert p.scales.dtype == np.float16 and np.array_equal(p.scales, scales)
    assert not np.shares_memory(p.scales, ckpt["scales"])
    assert p.symmetric == (zero_mode != "asym")
    if p.symmetric:
        assert p.zeros is None
    else:
        assert p.zeros.dtype == np.uint8 and np.array_equal(p.zeros, zeros)     # groups keep their index

    # act-order: perm is the stable sort of g_idx, after which column j is in group j // G
    # (a per-channel g_idx is all zeros, the default, so it needs no perm)
    assert (p.perm is not None) == (act_order and group_size != -1)
    if p.perm is not None:
        assert p.perm.dtype == np.int32 and p.perm.shape == lead + (K,)
        for e in range(experts or 1):
            perm, gi = (p.perm[e], g_idx[e]) if experts else (p.perm, g_idx)
            assert np.array_equal(perm, np.argsort(gi, kind="stable"))
            assert np.array_equal(gi[perm], np.arange(K) // g)
    # the layout itself: prepared column j holds original column perm[j]
    flat_codes = codes.reshape(-1, M, K)
    perms = np.broadcast_to(np.arange(K) if p.perm is None else p.perm, (len(flat_codes), K))
    want_codes = np.stack([c[:, o] for c, o in zip(flat_codes, perms, strict=True)])
    assert np.array_equal(_decode_prepared(p.qweight).reshape(-1, M, K), want_codes)

    ref = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=group_size)
    assert ref.dtype == np.float64 and ref.shape == lead + (M, K)
    assert np.array_equal(ref, _truth(codes, zeros, scales, g_idx, g))
    # Exact, not approximate: q - z is an integer in [-16, 15] and an fp16 scale has 11 significant bits,
    # so each product needs at most 16 bits. unprepare's float32 arithmetic and the float64 reference
    # therefore both compute it exactly, and rounding the reference to float32 changes nothing.
    w = w4a16.unprepare(p, dtype=np.float32)
    assert w.dtype == np.float32 and np.array_equal(w, ref.astype(np.float32))


@pytest.mark.parametrize("scale_dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("fmt", w4a16.FORMATS)
def test_round_trip_other_scale_dtypes(fmt, scale_dtype):
    ckpt, codes, zeros, scales, g_idx = _case(fmt, "asym", 64, fmt != "awq", 3, seed=5, scale_dtype=scale_dtype)
    p = w4a16.prepare(**ckpt, fmt=fmt, group_size=64)
    assert p.scales.dtype == np.dtype(scale_dtype)
    ref = w4a16.dequantize_checkpoint(**ckpt, fmt=fmt, group_size=64)
    assert np.array_equal(ref, _truth(codes, zeros, scales, g_idx, 64))
    # bf16 (8-bit significands) is exact as fp16 is; for float32 scales the float64 product is exact
    # (5 + 24 bits), so rounding it to float32 is the correctly rounded float32 product unprepare makes.
    w32 = w4a16.unprepare(p, np.float32)
    assert np.array_equal(w32, ref.astype(np.float32))
    for dt in (np.float16, BF16):                               # float32 first, then one rounding
        assert np.array_equal(w4a16.unprepare(p, dt), w32.astype(dt))


def test_scales_dtype_option_casts():
    ckpt, *_ = _case("gptq", "asym", 128)
    for dt in (BF16, "bfloat16", ml_dtypes.bfloat16, np.float32):
        p = w4a16.prepare(**ckpt, fmt="gptq", group_size=128, dtype=dt)
        assert p.scales.dtype == np.dtype(dt) and np.array_equal(p.scales, ckpt["scales"].T.astype(dt))


def test_uint32_words_equal_int32_words():
    ckpt, *_ = _case("awq", "asym", 32, experts=2)
    a = w4a16.prepare(**ckpt, fmt="awq", group_size=32)
    as_u32 = {k: (v.view(np.uint32) if k in ("qweight", "qzeros") else v) for k, v in ckpt.items()}
    b = w4a16.prepare(**as_u32, fmt="awq", group_size=32)
    assert np.array_equal(a.qweight, b.qweight) and np.array_equal(a.zeros, b.zeros)


def test_stack_with_one_default_expert_keeps_identity_perm():
    ckpt, codes, zeros, scales, g_idx = _case("gptq_v2", "asym", 32, True, 3, seed=2)
    g_idx[1] = np.arange(K) // 32
    ckpt["g_idx"] = g_idx
    p = w4a16.prepare(**ckpt, fmt="gptq_v2", group_size=32)
    assert np.array_equal(p.perm[1], np.arange(K)) and not np.array_equal(p.perm[0], np.arange(K))
    assert np.array_equal(w4a16.unprepare(p, np.float32), _truth(codes, zeros, scales, g_idx, 32).astype(np.float32))


def test_default_g_idx_gives_no_perm():
    ckpt, *_ = _case("gptq", "sym8", 64)
    ckpt["g_idx"] = (np.arange(K) // 64).astype(np.int32)
    assert w4a16.prepare(**ckpt, fmt="gptq", group_size=64).perm is None


def test_prepared_is_frozen():
    ckpt, *_ = _case("gptq", "none", 128)
    p = w4a16.prepare(**ckpt, fmt="gptq", group_size=128)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.symmetric = False


def test_torch_cpu_tensors_match_numpy():
    torch = pytest.importorskip("torch")
    ckpt, *_ = _case("gptq", "asym", 64, True, seed=3)
    want = w4a16.prepare(**ckpt, fmt="gptq", group_size=64, dtype=BF16)
    tens = {k: torch.from_numpy(v) for k, v in ckpt.items()}
    tens["scales"] = tens["scales"].to(torch.bfloat16)           # a bf16 tensor has no .numpy(): viewed as bits
    got = w4a16.prepare(**tens, fmt="gptq", group_size=64, dtype=torch.bfloat16)
    for f in ("qweight", "scales", "zeros", "perm"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    bf16_ckpt = {**ckpt, "scales": ckpt["scales"].astype(BF16)}
    assert np.array_equal(w4a16.dequantize_checkpoint(**tens, fmt="gptq", group_size=64),
                          w4a16.dequantize_checkpoint(**bf16_ckpt, fmt="gptq", group_size=64))


# ----------------------------------------------------------------------------------------------
# zero points


def _one_group(qzeros_word, fmt):
    """A K = 32, M = 8 checkpoint with random codes, unit scales and one qzeros word."""
    rng = np.random.default_rng(4)
    qweight = rng.integers(-2**31, 2**31, (4, 8) if fmt != "awq" else (32, 1)).astype(np.int32)
    qzeros = None if qzeros_word is None else np.full((1, 1), _u32(qzeros_word))
    return qweight, np.ones((1, 8), np.float16), qzeros


@pytest.mark.parametrize("fmt,stored,zero", [("gptq", 15, 16), ("gptq_v2", 15, 15), ("awq", 15, 15),
                                             ("gptq", 0, 1), ("gptq_v2", 0, 0)])
def test_v1_stores_zero_minus_one(fmt, stored, zero):
    qweight, scales, qzeros = _one_group(stored * 0x11111111, fmt)
    p = w4a16.prepare(qweight, scales, qzeros, fmt=fmt, group_size=32)
    assert not p.symmetric and p.zeros.dtype == np.uint8 and (p.zeros == zero).all()
    q = _decode_prepared(p.qweight)
    assert np.array_equal(w4a16.unprepare(p, np.float32), (q - zero).astype(np.float32))
    assert np.array_equal(w4a16.dequantize_checkpoint(qweight, scales, qzeros, fmt=fmt, group_size=32), q - zero)


@pytest.mark.parametrize("fmt,word,symmetric,zero", [
    ("gptq", 0x77777777, True, 8), ("gptq_v2", 0x88888888, True, 8), ("awq", 0x88888888, True, 8),
    ("gptq", None, True, 8), ("gptq_v2", None, True, 8),
    ("gptq_v2", 0x77777777, False, 7), ("gptq", 0x88888888, False, 9), ("gptq_v2", 0x88888878, False, None)])
def test_symmetric_detection(fmt, word, symmetric, zero):
    qweight, scales, qzeros = _one_group(word, fmt)
    p = w4a16.prepare(qweight, scales, qzeros, fmt=fmt, group_size=32)
    assert p.symmetric is symmetric and (p.zeros is None) == symmetric
    if zero is not None and not symmetric:
        assert (p.zeros == zero).all()
    q = _decode_prepared(p.qweight)
    z = np.full((8, 1), 8) if p.zeros is None else p.zeros
    assert np.array_equal(w4a16.unprepare(p, np.float32), (q - z).astype(np.float32))     # uint4b8: q - 8


# ----------------------------------------------------------------------------------------------
# validation


def _valid(fmt="gptq", g_idx=False, experts=None):
    ckpt, *_ = _case(fmt, "asym", 64, g_idx, experts, m=16, k=128)
    return ckpt


def _prep(ckpt, fmt="gptq", group_size=64, **kw):
    return w4a16.prepare(**ckpt, fmt=fmt, group_size=group_size, **kw)


def test_rejects_other_bit_widths_formats_and_group_sizes():
    with pytest.raises(InputValueError, match=r"only 4-bit weights are supported \(bits=4\); got bits=8"):
        _prep(_valid(), bits=8)
    with pytest.raises(InputValueError, match=r"fmt must be 'awq', 'gptq' .* or 'gptq_v2'; got 'marlin'"):
        _prep(_valid(), fmt="marlin")
    with pytest.raises(InputValueError, match=r"group_size must be 32, 64, 128 or -1 \(per-channel\); got 256"):
        _prep(_valid(), group_size=256)
    ckpt, *_ = _case("gptq", "asym", 32, k=96, m=16)
    with pytest.raises(InputValueError, match=r"group_size 64 does not divide K = 96 \(qweight's 12 rows x 8\)"):
        _prep(ckpt, group_size=64)


def test_rejects_bad_dtypes():
    ckpt = _valid()
    with pytest.raises(InputTypeError, match=r"qweight must be int32 or uint32 .*; got int64"):
        _prep({**ckpt, "qweight": ckpt["qweight"].astype(np.int64)})
    with pytest.raises(InputTypeError, match=r"qzeros must be int32 or uint32 .*; got float32"):
        _prep({**ckpt, "qzeros": ckpt["qzeros"].astype(np.float32)})
    with pytest.raises(InputTypeError, match=r"scales must be float16, bfloat16 or float32; got int32"):
        _prep({**ckpt, "scales": ckpt["scales"].astype(np.int32)})
    with pytest.raises(InputTypeError, match=r"g_idx must be an integer array \(int32 in checkpoints\); got float32"):
        _prep({**ckpt, "g_idx": np.zeros(128, np.float32)})
    with pytest.raises(InputTypeError, match=r"qweight must be a numpy array or a torch CPU tensor; got builtins.list"):
        _prep({**ckpt, "qweight": ckpt["qweight"].tolist()})
    with pytest.raises(InputTypeError, match=r"dtype must be float16, bfloat16 or float32 \(.*\); got 'int8'"):
        _prep(ckpt, dtype="int8")


def test_rejects_shapes_inconsistent_with_the_format():
    ckpt = _valid()                                     # GPTQ: qweight [16, 16] (K = 128), scales [2, 16]
    with pytest.raises(InputValueError, match=r"qweight must be 2-D \[K/8, M\] .* or 3-D \[E, K/8, M\]"):
        _prep({**ckpt, "qweight": ckpt["qweight"].reshape(-1)})
    with pytest.raises(InputValueError, match=r"scales must be \[K/G, M\] with K/G = 128/64 = 2 groups \(K = 128 "
                                              r"from qweight's 16 rows x 8\); scales imply K = 3 x 64 = 192"):
        _prep({**ckpt, "scales": np.ones((3, 16), np.float16)})
    with pytest.raises(InputValueError, match=r"qweight \[K/8, M\] and scales \[K/G, M\] disagree on M: "
                                              r"qweight has M = 16 columns, scales 24"):
        _prep({**ckpt, "scales": np.ones((2, 24), np.float16)})
    with pytest.raises(InputValueError, match=r"qzeros must be \[K/G, M/8\] = \[2, 2\] .*; got shape \[2, 3\]"):
        _prep({**ckpt, "qzeros": np.zeros((2, 3), np.int32)})
    with pytest.raises(InputValueError, match=r"scales must be \[K/G, M\] like qweight's 2-D \[K/8, M\]; "
                                              r"got shape \[1, 2, 16\]"):
        _prep({**ckpt, "scales": ckpt["scales"][None]})
    odd = {"qweight": np.zeros((16, 12), np.int32), "scales": np.ones((2, 12), np.float16),
           "qzeros": np.zeros((2, 1), np.int32)}
    with pytest.raises(InputValueError, match=r"M must be a multiple of 8; got M = 12"):
        _prep(odd)


def test_rejects_awq_shapes():
    ckpt = _valid("awq")                                # AWQ: qweight [128, 2] (M = 16), scales [2, 16]
    with pytest.raises(InputValueError, match=r"fmt='awq' qweight must be \[K, M/8\] = \[128, 2\] for the M = 16 "
                                              r"columns of scales; got 3 columns \(3 x 8 = 24\)"):
        _prep({**ckpt, "qweight": np.zeros((128, 3), np.int32)}, fmt="awq")
    with pytest.raises(InputValueError, match=r"K must be a multiple of 8 .*; got K = 100 \(qweight's 100 rows\)"):
        _prep({**ckpt, "qweight": np.zeros((100, 2), np.int32), "scales": np.ones((1, 16), np.float16),
               "qzeros": np.zeros((1, 2), np.int32)}, fmt="awq", group_size=-1)
    with pytest.raises(InputValueError, match=r"g_idx \(act-order\) is a GPTQ field; fmt='awq' checkpoints have none"):
        _prep({**ckpt, "g_idx": np.zeros(128, np.int32)}, fmt="awq")
    with pytest.raises(InputValueError, match=r"fmt='awq' needs qzeros"):
        _prep({**ckpt, "qzeros": None}, fmt="awq")


def test_rejects_bad_g_idx():
    ckpt = _valid(g_idx=True)
    with pytest.raises(InputValueError, match=r"g_idx must have K = 128 entries \(qweight's 16 rows x 8\).*"
                                              r"got shape \[120\]"):
        _prep({**ckpt, "g_idx": ckpt["g_idx"][:120]})
    with pytest.raises(InputValueError, match=r"g_idx values must lie in \[0, 2\) .*; got min 0, max 2"):
        _prep({**ckpt, "g_idx": np.where(np.arange(128) == 5, 2, ckpt["g_idx"]).astype(np.int32)})
    with pytest.raises(InputValueError, match=r"g_idx values must lie in \[0, 2\) .*; got min -1"):
        _prep({**ckpt, "g_idx": np.where(np.arange(128) == 5, -1, ckpt["g_idx"]).astype(np.int32)})
    lopsided = np.r_[np.zeros(66), np.ones(62)].astype(np.int32)[::-1].copy()
    with pytest.raises(InputValueError, match=r"g_idx puts 66 rows in group 0; act-order needs exactly "
                                              r"group_size = 64 rows in every group"):
        _prep({**ckpt, "g_idx": lopsided})
    stack = _valid(g_idx=True, experts=2)
    stack["g_idx"][1] = lopsided
    with pytest.raises(InputValueError, match=r"expert 1: g_idx puts 66 rows in group 0"):
        _prep(stack)


def test_rejects_mismatched_expert_stacks():
    stack = _valid(g_idx=True, experts=3)
    for name in ("scales", "qzeros", "g_idx"):
        with pytest.raises(InputValueError, match=rf"expert stack mismatch: qweight has E = 3 experts, {name} has 2"):
            _prep({**stack, name: stack[name][:2]})
    with pytest.raises(InputValueError, match=r"scales must be \[E, K/G, M\] like qweight's 3-D \[E, K/8, M\]"):
        _prep({**stack, "scales": stack["scales"][0]})
    p = _prep(stack)
    assert p.experts == 3 and p.qweight.shape == (3, 16, 16) and p.perm.shape == (3, 128)


def test_rejects_gpu_tensors():
    torch = pytest.importorskip("torch")
    ckpt = _valid()
    on_meta = torch.empty(tuple(ckpt["qweight"].shape), dtype=torch.int32, device="meta")   # not the host
    with pytest.raises(InputValueError, match=r"prepare runs on the host for now: pass qweight as a CPU tensor"):
        _prep({**ckpt, "qweight": on_meta})


def test_unprepare_and_pack_checkpoint_errors():
    p = _prep(_valid())
    with pytest.raises(InputTypeError, match=r"unprepare takes a hipskinny.w4a16.Prepared; got builtins.dict"):
        w4a16.unprepare(_valid())
    with pytest.raises(InputTypeError, match=r"dtype must be float16, bfloat16 or float32 \(.*\); got <class "
                                             r"'numpy.int32'>"):
        w4a16.unprepare(p, np.int32)
    codes, scales = np.zeros((16, 128), np.int64), np.ones((16, 2), np.float16)
    with pytest.raises(InputValueError, match=r"codes must lie in 0..15; got min 0, max 16"):
        w4a16.pack_checkpoint(codes + np.eye(16, 128, dtype=np.int64) * 16, None, scales, fmt="gptq", group_size=64)
    with pytest.raises(InputValueError, match=r"fmt='gptq' zero points must lie in 1..16 \(v1 stores z - 1\); "
                                              r"got min 0"):
        w4a16.pack_checkpoint(codes, np.zeros((16, 2)), scales, fmt="gptq", group_size=64)
