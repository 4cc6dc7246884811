"""VALU semantics of the CPU emulator, checked against values worked out from the ISA
rules (shared/reference/isa_notes.md §4-§7): each test decodes instruction text as
it appears in llvm-objdump listings, runs the handler on a wave with chosen
registers and EXEC, and compares bit patterns."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import paths
import pytest

from hipskinny.emulator import fp
from hipskinny.emulator.listing import Inst, parse_instruction
from hipskinny.emulator.ops import (
    DecodeContext,
    lookup,
    valu,  # noqa: F401  (registers the VALU ops)
)
from hipskinny.emulator.state import EXEC_LO, VCC_HI, VCC_LO, Wave
from hipskinny.errors import EmulatorError

# Handlers run outside run_launch here, where numpy float warnings are not silenced;
# inf/NaN results are the instructions' IEEE behaviour under test, not problems.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ARCH = {"gfx942": (9, 64, "fnuz"), "gfx950": (9, 64, "ocp"), "gfx1100": (11, 32, None),
        "gfx1151": (11, 32, None), "gfx1201": (12, 32, "ocp")}


def ctx_of(arch: str, **extra: object) -> DecodeContext:
    gfx, n, f8 = ARCH[arch]
    return DecodeContext(arch, gfx, n, f8, {}, dict(extra))


def decode(text: str, arch: str = "gfx942", **extra: object):
    mnemonic, ops, mods = parse_instruction(text)
    found = lookup(mnemonic)
    assert found is not None, f"{mnemonic} is not registered"
    return found[0](Inst(0x1000, 8, text, mnemonic, ops, mods, b""), ctx_of(arch, **extra))


def wave(arch: str = "gfx942", exec_mask: int | None = None) -> Wave:
    gfx, n, _ = ARCH[arch]
    w = Wave(n, gfx == 9, None, 0)
    w.set_exec((1 << n) - 1 if exec_mask is None else exec_mask)
    return w


def run(text: str, w: Wave, arch: str = "gfx942", **extra: object) -> Wave:
    decode(text, arch, **extra)(w)
    return w


def f32(x: object) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def as_f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


def h16(x: object) -> np.ndarray:
    return np.asarray(x, np.float16).view(np.uint16).astype(np.uint32)


# ---------------------------------------------------------------------------
# f32 arithmetic, rounding, modifiers


def test_add_f32_rne_ties_denormals_and_exec_mask() -> None:
    w = wave("gfx942", exec_mask=(1 << 64) - 1 - (1 << 5))     # lane 5 inactive
    a = np.full(64, 1.0, np.float32)
    b = np.full(64, 2.0 ** -24, np.float32)                      # exactly half an ulp of 1.0: tie -> even (1.0)
    a[1], b[1] = 1.0 + 2.0 ** -23, 2.0 ** -24                    # tie, odd -> rounds up to 1 + 2^-22
    a[2], b[2] = 2.0 ** -149, 2.0 ** -149                        # denormals kept
    a[3], b[3] = np.float32(3.4e38), np.float32(3.4e38)          # overflow -> inf
    a[4], b[4] = np.nan, 1.0
    w.v[1], w.v[2] = f32(a), f32(b)
    w.v[3][:] = 0xDEADBEEF
    run("v_add_f32_e32 v3, v1, v2", w)
    r = as_f32(w.v[3])
    assert r[0] == 1.0
    assert r[1] == np.float32(1.0 + 2.0 ** -22)
    assert r[2] == np.float32(2.0 ** -148)
    assert np.isinf(r[3])
    assert np.isnan(r[4]) and (w.v[3][4] & 0x00400000)            # quiet NaN
    assert w.v[3][5] == 0xDEADBEEF                                  # inactive lane untouched


def test_vop3_abs_neg_clamp_omod() -> None:
    w = wave()
    w.v[1], w.v[2] = f32(np.full(64, 0.75)), f32(np.full(64, -0.5))
    run("v_add_f32_e64 v3, -v1, |v2|", w)
    assert np.all(as_f32(w.v[3]) == -0.25)
    run("v_add_f32_e64 v3, v1, v1 clamp", w)                       # 1.5 -> 1.0
    assert np.all(as_f32(w.v[3]) == 1.0)
    run("v_add_f32_e64 v3, v2, v2 clamp", w)                       # -1 -> +0
    assert np.all(w.v[3] == 0)
    run("v_mul_f32_e64 v3, v1, v2 mul:4", w)
    assert np.all(as_f32(w.v[3]) == -1.5)
    run("v_sub_f32_e64 v3, v1, v2 div:2", w)
    assert np.all(as_f32(w.v[3]) == 0.625)
    w.v[1][:] = f32(np.nan)
    run("v_add_f32_e64 v3, v1, v2 clamp", w)                       # NaN clamps to 0 (DX10_CLAMP)
    assert np.all(w.v[3] == 0)


def test_inline_constants_typed_by_operand() -> None:
    w = wave()
    w.v[1][:] = f32(3.0)
    run("v_mul_f32_e32 v2, 0.5, v1", w)
    assert np.all(as_f32(w.v[2]) == 1.5)
    run("v_bfrev_b32_e32 v3, 0.5", w, "gfx950")                     # f32 bits of 0.5 reversed
    assert np.all(w.v[3] == int(f"{0x3F000000:032b}"[::-1], 2))
    run("v_cndmask_b32_e64 v4, 1.0, 2.0, s[2:3]", w)               # mask 0 -> S0
    assert np.all(as_f32(w.v[4]) == 1.0)
    w.s[2] = 0xFFFFFFFF
    run("v_cndmask_b32_e64 v4, 1.0, -|v1|, s[2:3]", w)             # bit set -> S1, modifiers on b32
    assert np.all(as_f32(w.v[4])[:32] == -3.0) and np.all(as_f32(w.v[4])[32:] == 1.0)
    run("v_add_f32_e32 v5, 0x3fc00000, v1", w)                     # hex literal is raw bits (1.5)
    assert np.all(as_f32(w.v[5]) == 4.5)


def test_fma_single_rounding() -> None:
    a = np.float32(1 + 2.0 ** -12)
    c = np.float32(2.0 ** -80)
    # exact a*a + c = 1 + 2^-11 + 2^-24 + 2^-80: just above an f32 tie -> rounds up.
    # Rounding the product first (or the sum to f64 first) lands exactly on the tie -> rounds to even (down).
    expect = np.float32(1 + 2.0 ** -11 + 2.0 ** -23)
    naive = (np.float64(a) * np.float64(a) + np.float64(c)).astype(np.float32)
    assert naive != expect
    w = wave()
    w.v[1][:], w.v[2][:] = f32(a), f32(c)
    run("v_fma_f32 v3, v1, v1, v2", w)
    assert np.all(as_f32(w.v[3]) == expect)
    w.v[4][:] = f32(c)
    run("v_fmac_f32_e32 v4, v1, v1", w)
    assert np.all(as_f32(w.v[4]) == expect)
    run("v_fmac_f32_e64 v4, s0, -v1", w)                           # D = s0 * -v1 + D with s0 = 0 -> unchanged
    assert np.all(as_f32(w.v[4]) == expect)
    w.v[5][:] = f32(2.0)
    run("v_fmaak_f32 v6, v5, v5, 0x3f800000", w)                   # 2*2 + 1
    run("v_fmamk_f32 v7, v5, 0x40400000, v5", w)                   # 2*3 + 2
    assert np.all(as_f32(w.v[6]) == 5.0) and np.all(as_f32(w.v[7]) == 8.0)


def _round_exact(q: Fraction, dtype: type = np.float32) -> float:
    """Correct RNE rounding of an exact rational to f32/f16 (reference, per element)."""
    if q == 0:
        return 0.0
    x = np.asarray(float(q), np.float64).astype(dtype)
    if np.isinf(x):
        return float(x)
    cands = [np.nextafter(x, dtype(-np.inf)), x, np.nextafter(x, dtype(np.inf))]
    ut = np.uint32 if dtype is np.float32 else np.uint16
    cands = [c for c in cands if np.isfinite(c)]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - q), int(np.asarray(c).view(ut)) & 1))
    return float(best)


def test_fma_and_dot_near_ties_against_exact_reference() -> None:
    rng = np.random.default_rng(1)
    k = 2000
    # short significands make products land on or next to f32 ties; tiny addends decide the rounding
    a = ((1 + rng.integers(0, 1 << 12, k) * 2.0 ** -12) * 2.0 ** rng.integers(-20, 20, k)).astype(np.float32)
    b = ((1 + rng.integers(0, 1 << 12, k) * 2.0 ** -12) * np.where(rng.random(k) < .5, -1, 1)).astype(np.float32)
    c = (np.where(rng.random(k) < .5, -1, 1) * 2.0 ** rng.integers(-90, 20, k)).astype(np.float32)
    r = fp.fma_f32(a, b, c)
    for i in range(k):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        assert float(r[i]) == _round_exact(exact), (a[i], b[i], c[i])
    # dot2 f16: two exact products and an f32 accumulator, one rounding
    h = (rng.integers(-2048, 2048, (4, k)) * 2.0 ** rng.integers(-12, 4, (4, k))).astype(np.float16)
    acc = (np.where(rng.random(k) < .5, -1, 1) * 2.0 ** rng.integers(-40, 10, k)).astype(np.float32)
    w = wave()
    for start in range(0, 640, 64):
        sl = slice(start, start + 64)
        w.v[2] = h16(h[0, sl]) | (h16(h[1, sl]) << 16)
        w.v[3] = h16(h[2, sl]) | (h16(h[3, sl]) << 16)
        w.v[1] = f32(acc[sl])
        run("v_dot2c_f32_f16_e32 v1, v2, v3", w)
        got = as_f32(w.v[1])
        for j in range(64):
            i = start + j
            exact = (Fraction(float(h[0, i])) * Fraction(float(h[2, i])) + Fraction(float(h[1, i]))
                     * Fraction(float(h[3, i])) + Fraction(float(acc[i])))
            assert float(got[j]) == _round_exact(exact), i


def test_fma_quiets_snan() -> None:
    w = wave()
    w.v[1][:] = 0x7F800001
    w.v[2][:] = f32(1.0)
    run("v_fma_f32 v3, v1, v2, v2", w)
    assert np.all(w.v[3] == 0x7FC00001)


def test_fma_f16_single_rounding() -> None:
    w = wave("gfx1201")
    w.v[1][:] = h16(np.float16(1 + 2.0 ** -10)) | 0xABCD0000
    w.v[2][:] = h16(np.float16(2.0 ** -11 + 2.0 ** -24))
    w.v[3][:] = 0x12340000
    # (1+2^-10)^2 + 2^-11 + 2^-24 = 1 + 2^-9 + 2^-20 + 2^-11 + 2^-24: fused rounding to 1 + 2^-9 + 2^-10
    run("v_fma_f16 v3, v1, v1, v2", w, "gfx1201")
    assert np.all(w.v[3] == (0x12340000 | int(h16(np.float16(1 + 2.0 ** -9 + 2.0 ** -10)))))


# ---------------------------------------------------------------------------
# conversions: f16, bf16, fp8


def test_cvt_f16_f32_rounding_overflow_denormals_and_gfx9_high_half() -> None:
    vals = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65519.0, 65520.0, 2.0 ** -24, 2.0 ** -25,
                     3 * 2.0 ** -26, -0.0, np.inf, 1e-10] + [0.0] * 54, np.float32)
    expect = np.array([0x3C00, 0x3C02, 0x7BFF, 0x7C00, 0x0001, 0x0000, 0x0001, 0x8000, 0x7C00, 0x0000]
                      + [0] * 54, np.uint32)
    w = wave("gfx942")
    w.v[1] = f32(vals)
    w.v[2][:] = 0xFFFF0000
    run("v_cvt_f16_f32_e32 v2, v1", w)                              # gfx9: bits 31:16 zeroed
    assert np.array_equal(w.v[2], expect)
    w32 = wave("gfx1201")
    w32.v[1] = f32(vals[:32])
    w32.v[2][:] = 0xFFFF0000
    run("v_cvt_f16_f32_e32 v2, v1", w32, "gfx1201")                 # gfx12: high half preserved
    assert np.array_equal(w32.v[2], expect[:32] | 0xFFFF0000)
    w11 = wave("gfx1100")
    w11.v[1] = f32(vals[:32])
    w11.v[2][:] = 0x0000BEEF
    run("v_cvt_f16_f32_e32 v2.h, v1", w11, "gfx1100")               # true16: write the high half only
    assert np.array_equal(w11.v[2], (expect[:32] << 16) | 0xBEEF)


def test_cvt_f32_f16_halves() -> None:
    w = wave("gfx942")
    w.v[12][:] = (h16(np.float16(-2.5)) << 16) | h16(np.float16(0.125))
    run("v_cvt_f32_f16_sdwa v1, v12 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1", w)
    assert np.all(as_f32(w.v[1]) == -2.5)
    run("v_cvt_f32_f16_e32 v2, v12", w)
    assert np.all(as_f32(w.v[2]) == 0.125)
    w11 = wave("gfx1100")
    w11.v[4][:] = (h16(np.float16(6.0)) << 16) | h16(np.float16(-1.0))
    run("v_cvt_f32_f16_e32 v5, v4.h", w11, "gfx1100")
    run("v_cvt_f32_f16_e32 v6, v4.l", w11, "gfx1100")
    assert np.all(as_f32(w11.v[5]) == 6.0) and np.all(as_f32(w11.v[6]) == -1.0)


def test_cvt_pk_bf16_f32_matches_ml_dtypes_rne() -> None:
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(64) * 1e3).astype(np.float32)
    b = (rng.standard_normal(64) * 1e-3).astype(np.float32)
    a[0] = np.float32(1 + 2.0 ** -8)                 # tie -> even (1.0)
    a[1] = np.float32(1 + 3 * 2.0 ** -8)             # tie -> even (1 + 2^-6)
    a[2] = np.float32(3.4e38)                        # rounds to inf
    b[0] = as_f32(np.array([0x7F800001], np.uint32))[0]   # sNaN -> quiet NaN
    w = wave("gfx950")
    w.v[1], w.v[2] = f32(a), f32(b)
    run("v_cvt_pk_bf16_f32 v3, v1, v2", w, "gfx950")
    lo, hi = w.v[3] & 0xFFFF, w.v[3] >> 16
    with np.errstate(invalid="ignore"):
        ref_a = a.astype(ml_dtypes.bfloat16).view(np.uint16)
        ref_b = b.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(lo, ref_a)
    assert np.array_equal(hi[1:], ref_b[1:])
    assert lo[0] == 0x3F80 and lo[1] == 0x3F82 and lo[2] == 0x7F80
    assert hi[0] == 0x7FC0                           # quieted, payload kept


@pytest.mark.parametrize("arch,dt,bdt", [("gfx942", ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz),
                                         ("gfx950", ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2),
                                         ("gfx1201", ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)])
def test_fp8_decode_all_codes_matches_ml_dtypes(arch: str, dt: type, bdt: type) -> None:
    for mnemonic, ref_t in (("v_cvt_pk_f32_fp8", dt), ("v_cvt_pk_f32_bf8", bdt)):
        codes = np.arange(256, dtype=np.uint32)
        ref = codes.astype(np.uint8).view(ref_t).astype(np.float32)
        n = ARCH[arch][1]
        for start in range(0, 256, 2 * n):
            chunk = codes[start:start + 2 * n]
            w = wave(arch)
            w.v[9][:] = chunk[0::2] | (chunk[1::2] << 8) | 0xAB000000    # bytes 0,1 (word 0)
            run(f"{mnemonic}_e32 v[16:17], v9", w, arch)
            got = np.empty(2 * n, np.float32)
            got[0::2], got[1::2] = as_f32(w.v[16]), as_f32(w.v[17])
            r = ref[start:start + 2 * n]
            assert np.array_equal(np.isnan(got), np.isnan(r)), mnemonic
            assert np.array_equal(got[~np.isnan(r)], r[~np.isnan(r)]), mnemonic


def test_fp8_decode_word_select() -> None:
    w = wave("gfx942")
    w.v[9][:] = 0x40380000                         # FNUZ (bias 8) bytes 2,3: 0x38 = 0.5, 0x40 = 1.0
    run("v_cvt_pk_f32_fp8_sdwa v[16:17], v9 src0_sel:WORD_1", w)
    assert np.all(as_f32(w.v[16]) == 0.5) and np.all(as_f32(w.v[17]) == 1.0)
    run("v_cvt_pk_f32_fp8_e64 v[14:15], v9 op_sel:[1,0]", w)
    assert np.all(as_f32(w.v[14]) == 0.5) and np.all(as_f32(w.v[15]) == 1.0)
    w2 = wave("gfx950")                            # same bytes, OCP (bias 7): twice the value
    w2.v[9][:] = 0x40380000
    run("v_cvt_pk_f32_fp8_sdwa v[16:17], v9 src0_sel:WORD_1", w2, "gfx950")
    assert np.all(as_f32(w2.v[16]) == 1.0) and np.all(as_f32(w2.v[17]) == 2.0)
    w3 = wave("gfx1201")
    w3.v[15][:] = 0x40380000
    run("v_cvt_pk_f32_fp8_e64 v[14:15], v15 op_sel:[1,0]", w3, "gfx1201")
    assert np.all(as_f32(w3.v[14]) == 1.0) and np.all(as_f32(w3.v[15]) == 2.0)


@pytest.mark.parametrize("arch,dt", [("gfx942", ml_dtypes.float8_e4m3fnuz), ("gfx950", ml_dtypes.float8_e4m3fn)])
def test_fp8_encode_rne_matches_ml_dtypes_in_range(arch: str, dt: type) -> None:
    fmt = fp.f8_formats(ARCH[arch][2])[0]
    mx = float(fmt.table[fmt.max_code])
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) * mx / 3).astype(np.float32)
    y = (rng.uniform(-1, 1, 64) * 2.0 ** rng.integers(-12, 2, 64)).astype(np.float32)   # denormal range too
    w = wave(arch)
    w.v[2], w.v[3] = f32(x), f32(y)
    w.v[6][:] = 0x12345678
    run("v_cvt_pk_fp8_f32 v6, v2, v3", w, arch)
    assert np.array_equal(w.v[6] & 0xFF, x.astype(dt).view(np.uint8))
    assert np.array_equal((w.v[6] >> 8) & 0xFF, y.astype(dt).view(np.uint8))
    assert np.all(w.v[6] >> 16 == 0x1234)                          # other word preserved (also on gfx9)
    run("v_cvt_pk_fp8_f32 v6, v3, v2 op_sel:[0,0,1]", w, arch)      # destination select: bits 31:16
    assert np.array_equal(w.v[6] >> 24, x.astype(dt).view(np.uint8))
    assert np.array_equal(w.v[6] & 0xFFFF, x.astype(dt).view(np.uint8) | (y.astype(dt).view(np.uint8).astype(
        np.uint32) << 8))


def test_fp8_encode_specials_both_flavours() -> None:
    # FP16_OVFL = 0: out of range -> NaN (E4M3) / inf (OCP E5M2); -0 only exists in OCP.
    # ml_dtypes agrees on all of these (its casts never saturate); the saturating MODE.FP16_OVFL=1
    # behaviour (±max) has no ml_dtypes counterpart and is checked against the format's max code.
    vals = np.array([300.0, -300.0, 464.0, 465.0, 248.0, 240.0, -0.0, np.inf, np.nan, 1e-6], np.float32)
    fnuz, _ = fp.f8_formats("fnuz")
    ocp, ocp_b = fp.f8_formats("ocp")
    assert list(fnuz.encode(vals)) == [0x80, 0x80, 0x80, 0x80, 0x80, 0x7F, 0x00, 0x80, 0x80, 0x00]
    assert list(ocp.encode(vals)) == [0x79, 0xF9, 0x7E, 0x7F, 0x78, 0x77, 0x80, 0x7F, 0x7F, 0x00]
    for fmt, dt in ((fnuz, ml_dtypes.float8_e4m3fnuz), (ocp, ml_dtypes.float8_e4m3fn),
                    (ocp_b, ml_dtypes.float8_e5m2), (fp.BF8_FNUZ, ml_dtypes.float8_e5m2fnuz)):
        ref = vals.astype(dt).view(np.uint8)
        got = fmt.encode(vals)
        nan_ref = np.isnan(ref.view(dt).astype(np.float32))
        assert np.array_equal(np.isnan(fmt.decode(got)), nan_ref), fmt.name
        assert np.array_equal(got[~nan_ref], ref[~nan_ref]), fmt.name
    assert list(fnuz.encode(vals[:2], saturate=True)) == [0x7F, 0xFF]
    assert list(ocp_b.encode(np.array([1e6, -np.inf], np.float32))) == [0x7C, 0xFC]


def test_fp8_requires_hardware_format() -> None:
    with pytest.raises(EmulatorError, match="fp8"):
        decode("v_cvt_pk_fp8_f32 v6, v2, v3", "gfx1100")


def test_cvt_scalef32_uses_only_the_exponent() -> None:
    w = wave("gfx950")
    w.v[1][:] = 0x3840                            # OCP bytes 0x40 = 2.0, 0x38 = 1.0
    w.v[2][:] = f32(3.0)                          # exponent of 3.0 is 2^1: acts as 2.0
    run("v_cvt_scalef32_pk_f32_fp8 v[4:5], v1, v2", w, "gfx950")
    assert np.all(as_f32(w.v[4]) == 4.0) and np.all(as_f32(w.v[5]) == 2.0)


def test_int_float_conversions() -> None:
    w = wave()
    w.v[1] = f32(np.array([1.9, -1.9, 3e9, -3e9, np.nan, 4.5e9, -0.5, 2.5] * 8, np.float32))
    run("v_cvt_i32_f32_e32 v2, v1", w)
    assert list(w.v[2][:8].view(np.int32)) == [1, -1, 2 ** 31 - 1, -2 ** 31, 0, 2 ** 31 - 1, 0, 2]
    run("v_cvt_u32_f32_e32 v3, v1", w)
    assert list(w.v[3][:8]) == [1, 0, 3000000000, 0, 0, 2 ** 32 - 1, 0, 2]
    w.v[4][:] = 16777217                          # 2^24 + 1: RNE to 2^24
    run("v_cvt_f32_u32_e32 v5, v4", w)
    assert np.all(as_f32(w.v[5]) == 16777216.0)


# ---------------------------------------------------------------------------
# dot products


def test_dot2_f16_single_rounding_all_forms() -> None:
    # acc 1.0 + 2^-12*2^-12 + 2^-15*2^-15 = 1 + 2^-24 + 2^-30: above the tie -> 1 + 2^-23 with one rounding
    a = (h16(np.float16(2.0 ** -15)) << 16) | h16(np.float16(2.0 ** -12))
    expect = np.float32(1 + 2.0 ** -23)
    cases = [("gfx942", "v_dot2c_f32_f16_e32 v1, v2, v2"), ("gfx950", "v_dot2c_f32_f16_e32 v1, v2, v2"),
             ("gfx1100", "v_dot2acc_f32_f16 v1, v2, v2"), ("gfx1201", "v_dot2_f32_f16 v1, v2, v2, v1")]
    for arch, text in cases:
        w = wave(arch)
        w.v[2][:] = a
        w.v[1][:] = f32(1.0)
        run(text, w, arch)
        assert np.all(as_f32(w.v[1]) == expect), arch
    w = wave("gfx1100")
    w.v[2][:] = a
    w.v[1][:] = f32(1.0)
    run("v_dual_dot2acc_f32_f16 v1, v2, v2 :: v_dual_mov_b32 v3, v1", w, "gfx1100")
    assert np.all(as_f32(w.v[1]) == expect) and np.all(as_f32(w.v[3]) == 1.0)


def test_dot2_bf16_and_vop3p_selects() -> None:
    def bf(x: float) -> int:
        return int(np.float32(x).view(np.uint32)) >> 16
    w = wave("gfx1201")
    w.v[3][:] = (bf(3.0) << 16) | bf(-2.0)
    w.v[4][:] = (bf(0.5) << 16) | bf(4.0)
    w.v[5][:] = f32(10.0)
    run("v_dot2_f32_bf16 v6, v3, v4, v5", w, "gfx1201")            # -8 + 1.5 + 10
    assert np.all(as_f32(w.v[6]) == 3.5)
    run("v_dot2_f32_bf16 v6, v3, v4, v5 op_sel:[1,0,0] op_sel_hi:[0,1,1]", w, "gfx1201")   # swap S0 halves
    assert np.all(as_f32(w.v[6]) == 3.0 * 4.0 + (-2.0) * 0.5 + 10.0)
    run("v_dot2_f32_bf16 v6, v3, v4, v5 neg_lo:[1,0,1]", w, "gfx1201")
    assert np.all(as_f32(w.v[6]) == 8.0 + 1.5 - 10.0)
    w9 = wave("gfx950")
    w9.v[3], w9.v[4], w9.v[1] = w.v[3][0], w.v[4][0], f32(10.0)
    run("v_dot2c_f32_bf16_e32 v1, v3, v4", w9, "gfx950")
    assert np.all(as_f32(w9.v[1]) == 3.5)


def test_dot2_gfx11_flushes_tiny_results() -> None:
    a = h16(np.float16(-0.0))                       # products are 0: the result is the denormal accumulator
    for arch, flushed in (("gfx1100", True), ("gfx1201", False)):
        w = wave(arch)
        w.v[2][:] = a
        w.v[1][:] = f32(2.0 ** -140)
        text = "v_dot2acc_f32_f16 v1, v2, v2" if arch == "gfx1100" else "v_dot2_f32_f16 v1, v2, v2, v1"
        run(text, w, arch)
        r = as_f32(w.v[1])
        assert np.all(r == 0) if flushed else np.all(r == np.float32(2.0 ** -140))


def test_dot4_fp8_and_int_dots() -> None:
    w = wave("gfx1201")
    w.v[1][:] = 0x38384038                         # OCP e4m3: 1, 2, 1, 1 (bytes 0..3)
    w.v[2][:] = 0x40384038                         # 1, 2, 1, 2
    w.v[3][:] = f32(0.5)
    run("v_dot4_f32_fp8_fp8 v4, v1, v2, v3", w, "gfx1201")
    assert np.all(as_f32(w.v[4]) == 1 + 4 + 1 + 2 + 0.5)
    w9 = wave("gfx942")
    w9.v[1][:] = 0xFF02FE03                        # i8: 3, -2, 2, -1
    w9.v[2][:] = 0x01020304                        # 4, 3, 2, 1
    w9.v[3][:] = 100
    run("v_dot4_i32_i8 v4, v1, v2, v3", w9)
    assert np.all(w9.v[4] == 12 - 6 + 4 - 1 + 100)


# ---------------------------------------------------------------------------
# DPP


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, 16)


def test_dpp_row_shr_bound_ctrl_reads_zero_at_row_start() -> None:
    w = wave()
    x = np.arange(64, dtype=np.float32) + 1
    w.v[4] = f32(x)
    run("v_add_f32_dpp v1, v4, v4 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1", w)
    expect = x + np.where(np.arange(64) % 16 == 0, 0, np.roll(x, 1))
    assert np.array_equal(as_f32(w.v[1]), expect)


def test_dpp_without_bound_ctrl_leaves_invalid_lanes_and_masks() -> None:
    w = wave()
    w.v[1][:] = 7
    w.v[3][:] = 0xAAAA
    run("v_mov_b32_dpp v3, v1 row_shr:4 row_mask:0xf bank_mask:0xe", w)   # bank 0 (lanes 0-3 of a row) off
    r = _rows(w.v[3])
    assert np.all(r[:, :4] == 0xAAAA) and np.all(r[:, 4:] == 7)
    w.v[1] = np.arange(64, dtype=np.uint32)
    w.v[3][:] = 0xAAAA
    run("v_mov_b32_dpp v3, v1 row_shl:3 row_mask:0x5 bank_mask:0xf", w)   # rows 1,3 off; lanes 13-15 invalid
    r = _rows(w.v[3])
    assert np.all(r[[1, 3]] == 0xAAAA)
    assert np.array_equal(r[0, :13], np.arange(3, 16)) and np.all(r[0, 13:] == 0xAAAA)


def test_dpp_row_bcast_and_full_gfx9_reduction() -> None:
    w = wave()
    x = np.arange(64, dtype=np.uint32) * 10
    w.v[7] = x
    w.v[8][:] = 1
    run("v_mov_b32_dpp v8, v7 row_bcast:15 row_mask:0xa bank_mask:0xf bound_ctrl:1", w)
    r = _rows(w.v[8])
    assert np.all(r[0] == 1) and np.all(r[2] == 1)
    assert np.all(r[1] == x[15]) and np.all(r[3] == x[47])
    run("v_mov_b32_dpp v8, v7 row_bcast:31 row_mask:0xc bank_mask:0xf bound_ctrl:1", w)
    r = _rows(w.v[8])
    assert np.all(r[2] == x[31]) and np.all(r[3] == x[31]) and np.all(r[1] == x[15])
    # the compiler's wave64 sum: row_shr 1,2,4,8 with bound_ctrl, then row_bcast 15 / 31, readlane 63
    vals = np.random.default_rng(4).integers(-50, 50, 64).astype(np.float32)
    w.v[1] = f32(vals)
    for s in (1, 2, 4, 8):
        run(f"v_mov_b32_dpp v2, v1 row_shr:{s} row_mask:0xf bank_mask:0xf bound_ctrl:1", w)
        run("v_add_f32_e32 v1, v1, v2", w)
    run("v_mov_b32_dpp v2, v1 row_bcast:15 row_mask:0xa bank_mask:0xf bound_ctrl:1", w)
    run("v_add_f32_e32 v1, v1, v2", w)
    w.v[2][:] = 0
    run("v_mov_b32_dpp v2, v1 row_bcast:31 row_mask:0xc bank_mask:0xf bound_ctrl:1", w)
    run("v_add_f32_e32 v1, v1, v2", w)
    run("v_readlane_b32 s2, v1, 63", w)
    assert as_f32(np.array([w.s[2]]))[0] == vals.sum()


def test_dpp_quad_perm_mirror_xmask_share_and_dpp8() -> None:
    w = wave("gfx1100")
    w.v[1] = np.arange(32, dtype=np.uint32)
    run("v_mov_b32_dpp v2, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf", w, "gfx1100")
    assert np.array_equal(w.v[2], np.arange(32) ^ 1)
    run("v_mov_b32_dpp v2, v1 row_mirror row_mask:0xf bank_mask:0xf", w, "gfx1100")
    assert np.array_equal(w.v[2], (np.arange(32) & ~15) | (15 - np.arange(32) % 16))
    run("v_mov_b32_dpp v2, v1 row_half_mirror row_mask:0xf bank_mask:0xf", w, "gfx1100")
    assert np.array_equal(w.v[2], (np.arange(32) & ~7) | (7 - np.arange(32) % 8))
    run("v_mov_b32_dpp v2, v1 row_xmask:8 row_mask:0xf bank_mask:0xf", w, "gfx1100")
    assert np.array_equal(w.v[2], np.arange(32) ^ 8)
    run("v_mov_b32_dpp v2, v1 row_share:15 row_mask:0xf bank_mask:0xf", w, "gfx1100")
    assert np.array_equal(w.v[2], (np.arange(32) & ~15) | 15)
    run("v_mov_b32_dpp v5, v1 dpp8:[4,5,6,7,0,1,2,3]", w, "gfx1100")
    assert np.array_equal(w.v[5], np.arange(32) ^ 4)
    with pytest.raises(EmulatorError, match="row_bcast"):
        decode("v_mov_b32_dpp v2, v1 row_bcast:15 row_mask:0xf bank_mask:0xf", "gfx1100")


def test_dpp_inactive_source_lanes_gfx11_vs_gfx9() -> None:
    # gfx10+: an inactive source lane counts as invalid (fi:0) -> 0 with bound_ctrl; gfx9 reads its value
    for arch, expect_lane1 in (("gfx1100", 0), ("gfx942", 100)):
        n = ARCH[arch][1]
        w = wave(arch, exec_mask=((1 << n) - 1) & ~1)            # lane 0 inactive
        w.v[1] = np.arange(n, dtype=np.uint32) + 100
        run("v_mov_b32_dpp v2, v1 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1", w, arch)
        assert w.v[2][1] == expect_lane1 and w.v[2][0] == 0 and w.v[2][2] == 101
    w = wave("gfx1100", exec_mask=0xFFFFFFFE)
    w.v[1] = np.arange(32, dtype=np.uint32) + 100
    run("v_mov_b32_dpp v2, v1 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1 fi:1", w, "gfx1100")
    assert w.v[2][1] == 100
    run("v_mov_b32_dpp v3, v1 dpp8:[1,0,3,2,5,4,7,6]", w, "gfx1100")       # DPP8: inactive source reads 0
    assert w.v[3][1] == 0 and w.v[3][2] == 103


# ---------------------------------------------------------------------------
# compares, carries, EXEC


def test_compare_writes_mask_for_active_lanes_only_wave64() -> None:
    w = wave("gfx942", exec_mask=0x00FF00FF00FF00FF)
    w.v[1] = np.arange(64, dtype=np.uint32)
    w.s[5] = 10
    w.s[VCC_LO] = w.s[VCC_HI] = 0xFFFFFFFF
    run("v_cmp_gt_i32_e32 vcc, s5, v1", w)                         # 10 > lane
    expect = 0x00FF00FF00FF00FF & ((1 << 10) - 1)
    assert w.sget(VCC_LO, 2) == expect
    run("v_cmp_le_i32_e64 s[0:1], s5, v1", w)
    assert w.sget(0, 2) == 0x00FF00FF00FF00FF & ~((1 << 10) - 1)
    with pytest.raises(EmulatorError):
        decode("v_cmp_le_i32_e64 s0, s5, v1", "gfx942")            # wave64 needs a pair


def test_compare_wave32_and_null_and_cmpx() -> None:
    w = wave("gfx1100", exec_mask=0x0000FFFF)
    w.v[1] = np.arange(32, dtype=np.uint32)
    w.s[VCC_HI] = 0x12345678
    run("v_cmp_gt_u32_e32 vcc_lo, 20, v1", w, "gfx1100")
    assert w.s[VCC_LO] == 0xFFFF and w.s[VCC_HI] == 0x12345678     # only vcc_lo written
    run("v_cmp_le_i32_e64 null, s4, v1", w, "gfx1100")              # discarded, no error
    w.s[19] = 5
    run("v_cmpx_gt_i32_e64 s19, v1", w, "gfx1100")                  # EXEC = active & (5 > lane)
    assert w.s[EXEC_LO] == 0x1F
    w.v[2] = np.zeros(32, np.uint32)
    w.v[2][3] = 1
    run("v_cmpx_eq_u32_e32 0, v2", w, "gfx1100")
    assert w.s[EXEC_LO] == 0x17


def test_float_compares_nan_and_class() -> None:
    w = wave()
    a = np.array([1.0, np.nan, 2.0, -0.0] * 16, np.float32)
    b = np.array([2.0, 1.0, np.nan, 0.0] * 16, np.float32)
    w.v[1], w.v[2] = f32(a), f32(b)
    expect = {"lt": [1, 0, 0, 0], "neq": [1, 1, 1, 0], "nlt": [0, 1, 1, 1], "eq": [0, 0, 0, 1],
              "u": [0, 1, 1, 0], "o": [1, 0, 0, 1], "lg": [1, 0, 0, 0], "nge": [1, 1, 1, 0]}
    for op, bits in expect.items():
        run(f"v_cmp_{op}_f32_e64 s[4:5], v1, v2", w)
        m = w.sget(4, 2)
        assert [(m >> i) & 1 for i in range(4)] == bits, op
    c = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0] * 8, np.float32)
    w.v[3] = f32(c)
    w.v[3][8] = 0x7F800001                                         # sNaN
    w.v[3][9] = 0x7FC00000                                         # qNaN
    w.v[4][:] = 0
    for bit, lane in ((9, 0), (2, 1), (6, 2), (5, 3), (7, 4), (4, 5), (8, 6), (3, 7), (0, 8), (1, 9)):
        w.v[4][lane] = 1 << bit
    run("v_cmp_class_f32_e64 s[6:7], v3, v4", w)
    assert w.sget(6, 2) & 0x3FF == 0x3FF


def test_carry_chain_gfx9_and_gfx11() -> None:
    w = wave("gfx942", exec_mask=(1 << 64) - 1 - 2)                # lane 1 inactive
    lo = np.full(64, 0xFFFFFFF0, np.uint32)
    lo[2] = 5
    w.v[1] = lo
    w.v[2][:] = 0x20
    w.v[3][:] = 7
    run("v_add_co_u32_e32 v4, vcc, v1, v2", w)
    assert w.sget(VCC_LO, 2) == ((1 << 64) - 1) & ~(1 << 1) & ~(1 << 2)
    run("v_addc_co_u32_e32 v5, vcc, 0, v3, vcc", w)
    assert w.v[5][0] == 8 and w.v[5][2] == 7 and w.v[4][0] == 0x10
    w11 = wave("gfx1100")
    w11.v[3][:] = 0xFFFFFFFF
    w11.s[2] = 1
    run("v_add_co_u32 v1, s2, s2, v3", w11, "gfx1100")
    assert w11.s[2] == 0xFFFFFFFF and np.all(w11.v[1] == 0)
    w11.s[VCC_LO] = 0x0000FFFF
    w11.v[67][:] = 4
    run("v_add_co_ci_u32_e64 v77, null, 0, v67, vcc_lo", w11, "gfx1100")
    assert np.array_equal(w11.v[77], np.where(np.arange(32) < 16, 5, 4))
    w11.v[5][:] = 3
    w11.s[0] = 0xFFFFFFFF
    run("v_subrev_co_ci_u32_e64 v6, s0, 2, v5, s0", w11, "gfx1100")   # 3 - 2 - 1 = 0, no borrow
    assert np.all(w11.v[6] == 0) and w11.s[0] == 0


def test_mad_u64_lshl_add_u64_and_64bit_shifts() -> None:
    w = wave("gfx942")
    w.s[5] = 0xFFFFFFFF
    w.v[1][:] = 0xFFFFFFFF
    w.v[4][:], w.v[5][:] = 0xFFFFFFFF, 0xFFFFFFFF
    run("v_mad_u64_u32 v[2:3], s[6:7], s5, v1, v[4:5]", w)
    p = (0xFFFFFFFF * 0xFFFFFFFF + 0xFFFFFFFFFFFFFFFF)
    assert w.v[2][0] == p & 0xFFFFFFFF and w.v[3][0] == (p >> 32) & 0xFFFFFFFF
    assert w.sget(6, 2) == (1 << 64) - 1                            # carry out of bit 64
    w.v[0][:], w.v[1][:] = 0x80000001, 0x1
    w.s[0], w.s[1] = 0x10, 0
    run("v_lshl_add_u64 v[4:5], v[0:1], 3, s[0:1]", w)
    v = ((0x1_80000001 << 3) + 0x10)
    assert w.v[4][0] == v & 0xFFFFFFFF and w.v[5][0] == v >> 32
    w.v[9][:] = 9                                                  # shift amount uses bits 2:0 only
    run("v_lshl_add_u64 v[4:5], v[0:1], v9, 0", w)
    v = 0x1_80000001 << 1
    assert w.v[4][0] == v & 0xFFFFFFFF and w.v[5][0] == v >> 32
    run("v_lshlrev_b64 v[6:7], 33, v[0:1]", w)
    assert w.v[6][0] == 0 and w.v[7][0] == 2
    w.s[0] = 0xFFFFFFFE
    run("v_mad_i64_i32 v[2:3], s[6:7], s0, -1, 0", w)               # -2 * -1 = 2, no carry
    assert w.v[2][0] == 2 and w.v[3][0] == 0 and w.sget(6, 2) == 0


def test_32bit_literal_for_64bit_integer_operand_extends_by_signedness() -> None:
    """gfx11/12 VOP3 takes a literal: zero-extended for an unsigned 64-bit operand (the form clang
    emits for (a * b + c) truncated to 32 bits), sign-extended for a signed one."""
    w = wave("gfx1151")
    w.v[1][:], w.s[4] = 3, 0x00100010
    run("v_mad_u64_u32 v[2:3], null, v1, s4, 0xd400d400", w, "gfx1151")
    p = 3 * 0x00100010 + 0xD400D400
    assert np.all(w.v[2] == p & 0xFFFFFFFF) and np.all(w.v[3] == p >> 32)
    w.s[4] = 1
    run("v_mad_i64_i32 v[2:3], null, v1, s4, 0xd400d400", w, "gfx1151")
    p = (3 + (0xD400D400 - (1 << 32))) & ((1 << 64) - 1)
    assert np.all(w.v[2] == p & 0xFFFFFFFF) and np.all(w.v[3] == p >> 32)


# ---------------------------------------------------------------------------
# VOPD, true16, SDWA, gfx9 16-bit rule


def test_vopd_reads_all_sources_before_writing() -> None:
    w = wave("gfx1100")
    w.v[0][:], w.v[1][:] = 10, 20
    run("v_dual_mov_b32 v1, v0 :: v_dual_mov_b32 v0, v1", w, "gfx1100")    # swap
    assert np.all(w.v[1] == 10) and np.all(w.v[0] == 20)
    # Y reads X's destination and must see the old value
    w.s[VCC_LO] = 0xFFFFFFFF
    w.v[6][:], w.v[3][:], w.v[1][:] = 1, 2, 5
    run("v_dual_cndmask_b32 v1, v6, v3 :: v_dual_lshlrev_b32 v22, 2, v1", w, "gfx1100")
    assert np.all(w.v[1] == 2) and np.all(w.v[22] == 20)
    # X reads a register that Y writes
    w.v[3][:] = f32(1.5)
    w.v[5][:] = f32(2.0)
    w.v[0][:] = 7
    w.s[18] = 1
    run("v_dual_add_f32 v4, v3, v5 :: v_dual_add_nc_u32 v3, s18, v0", w, "gfx1100")
    assert np.all(as_f32(w.v[4]) == 3.5) and np.all(w.v[3] == 8)
    run("v_dual_fmac_f32 v10, v12, v2 :: v_dual_lshlrev_b32 v3, 16, v3", w, "gfx1201")
    run("v_dual_max_num_f32 v10, v12, v2 :: v_dual_mov_b32 v3, 0", w, "gfx1201")
    with pytest.raises(EmulatorError):
        decode("v_dual_mov_b32 v1, v0 :: v_dual_foo_b32 v2, v0", "gfx1100")


def test_vopd_respects_exec() -> None:
    w = wave("gfx1100", exec_mask=0xF)
    w.v[1][:] = 3
    run("v_dual_mov_b32 v6, 0 :: v_dual_mov_b32 v7, v1", w, "gfx1100")
    assert np.all(w.v[7][:4] == 3) and np.all(w.v[7][4:] == 0)


def test_true16_halves_gfx11() -> None:
    w = wave("gfx1100")
    w.v[2][:] = 0x00210000
    w.v[3][:] = 0x5555AAAA
    run("v_or_b16 v3.h, v2.h, 64 op_sel:[1,0,1]", w, "gfx1100")
    assert np.all(w.v[3] == 0x0061AAAA)
    w.s[1] = 0x1234ABCD
    run("v_mov_b16_e32 v0.l, s1", w, "gfx1100")
    w.v[0][:] = 0xFFFF0000
    run("v_mov_b16_e32 v0.l, s1", w, "gfx1100")
    assert np.all(w.v[0] == 0xFFFFABCD)
    run("v_mov_b16_e32 v14.h, 0", w, "gfx1100")
    w.v[9][:] = 0x00010004                        # alignbit shift from v9.l = 4 (v9.h would be 1)
    w.v[8][:], w.v[6][:] = 0x1, 0x0
    run("v_alignbit_b32 v10, v8, v6, v9.l", w, "gfx1100")
    assert np.all(w.v[10] == 0x10000000)
    with pytest.raises(EmulatorError):
        decode("v_mov_b16_e32 v0.l, s1", "gfx1201")                 # true16 syntax outside gfx11


def test_gfx9_16bit_zeroes_high_half_gfx12_keeps_it() -> None:
    for arch, keep in (("gfx942", False), ("gfx1201", True)):
        w = wave(arch)
        w.v[1][:] = 0xABCD0000 | int(h16(np.float16(1.5)))
        w.v[2][:] = int(h16(np.float16(2.25)))
        w.v[3][:] = 0x77770000
        run("v_add_f16_e32 v3, v1, v2", w, arch)
        lo = int(h16(np.float16(3.75)))
        assert np.all(w.v[3] == ((0x77770000 | lo) if keep else lo)), arch
    w = wave("gfx942")
    w.v[1][:] = int(h16(np.float16(1.0)))
    w.v[2][:] = int(h16(np.float16(2.0)))
    w.v[3][:] = 0x55550000 | int(h16(np.float16(0.5)))
    run("v_fmac_f16_e32 v3, v1, v2", w)                            # exception: preserves bits 31:16
    assert np.all(w.v[3] == 0x55550000 | int(h16(np.float16(2.5))))


def test_sdwa_selects_and_dst_placement() -> None:
    w = wave()
    w.v[2][:] = 0x12345678
    w.v[3][:] = 0x00000F00
    run("v_or_b32_sdwa v4, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD", w)
    assert np.all(w.v[4] == 0x1F34)
    w.v[5][:] = 0xAAAAAAAA
    run("v_add_u32_sdwa v5, v2, v3 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_0 src1_sel:BYTE_1", w)
    assert np.all(w.v[5] == ((0x78 + 0x0F) << 16) | 0xAAAA)
    w.v[6][:] = 0x000000F0
    run("v_mov_b32_sdwa v7, sext(v6) dst_sel:WORD_0 dst_unused:UNUSED_SEXT src0_sel:BYTE_0", w)
    assert np.all(w.v[7] == 0xFFFFFFF0)
    run("v_cmp_eq_u32_sdwa vcc, v2, v2 src0_sel:WORD_0 src1_sel:DWORD", w)     # 0x5678 == 0x12345678: no
    assert w.sget(VCC_LO, 2) == 0


# ---------------------------------------------------------------------------
# min/max NaN rules, integer and bit ops


def test_min_max_nan_rules_per_generation() -> None:
    snan = np.uint32(0x7F800001)
    qnan = np.uint32(0x7FC00000)
    w = wave("gfx942")
    w.v[1][:] = f32(1.0)
    w.v[2][:4] = [snan, qnan, f32(-0.0), f32(0.0)]
    w.v[3][:4] = f32(np.array([1.0, 1.0, 0.0, -0.0], np.float32))
    w.v[4][:] = w.v[2]
    run("v_max_f32_e32 v5, v2, v1", w)                             # gfx9/11 IEEE: sNaN -> quieted NaN
    assert w.v[5][0] == 0x7FC00001 and as_f32(w.v[5])[1] == 1.0
    run("v_max_f32_e32 v5, v2, v3", w)                             # +0 > -0 either order
    assert w.v[5][2] == 0 and w.v[5][3] == 0
    run("v_min_f32_e32 v5, v2, v3", w)
    assert w.v[5][2] == 0x80000000 and w.v[5][3] == 0x80000000
    w12 = wave("gfx1201")
    w12.v[1][:] = f32(1.0)
    w12.v[2][:2] = [snan, qnan]
    run("v_max_num_f32_e32 v5, v2, v1", w12, "gfx1201")            # gfx12: any single NaN -> other operand
    assert np.all(as_f32(w12.v[5][:2]) == 1.0)
    w.v[6][:] = f32(5.0)
    w.v[7][:] = f32(-3.0)
    run("v_med3_f32 v8, v6, v7, v1", w, "gfx1100")
    assert np.all(as_f32(w.v[8]) == 1.0)
    w.v[7][:] = qnan
    run("v_med3_f32 v8, v6, v7, v1", w, "gfx1100")                 # NaN input: min3 of the inputs
    assert np.all(as_f32(w.v[8]) == 1.0)


def test_perm_constant_selectors_match_the_per_lane_table() -> None:
    """A selector that is one value in every lane (a constant or an SGPR: read-only arrays) takes a
    byte-shuffle path; for every byte pick (0-15) it gives the per-lane table's result."""
    from hipskinny.emulator.ops.valu_arith import _perm
    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 2**32, 64, dtype=np.uint32) for _ in range(2))
    a[:8] |= 0x80808080                              # sign bits set in some lanes' bytes
    for picks in rng.integers(0, 16, (600, 4)):
        value = sum(int(p) << (8 * k) for k, p in enumerate(picks))
        table = _perm(a, b, np.full(64, value, np.uint32))    # writable: the per-lane table
        const = np.full(64, value, np.uint32)
        const.flags.writeable = False
        np.testing.assert_array_equal(_perm(a, b, const), table, err_msg=hex(value))


def test_integer_and_bit_ops() -> None:
    w = wave()
    w.v[1][:] = 0xF0F0F0F0
    w.v[2][:] = 0x12345678
    run("v_perm_b32 v3, v1, v2, 0x07060302", w)                    # high halves of two words
    assert np.all(w.v[3] == 0xF0F01234)
    w.s[0] = 0x0c0b0a09
    run("v_perm_b32 v3, v1, v2, s0", w)                            # sign replicas of bytes 3,5,7 and 0x00
    assert np.all(w.v[3] == 0x00FFFF00)
    run("v_bfe_u32 v4, v2, 4, 8", w)
    assert np.all(w.v[4] == 0x67)
    run("v_bfe_i32 v4, v1, 4, 4", w)
    assert np.all(w.v[4] == 0xFFFFFFFF)
    run("v_bfe_u32 v4, v2, 4, 0", w)
    assert np.all(w.v[4] == 0)
    run("v_bfi_b32 v4, 0xffff, v2, v1", w)
    assert np.all(w.v[4] == 0xF0F05678)
    run("v_alignbit_b32 v4, v1, v2, 8", w)
    assert np.all(w.v[4] == 0xF0123456)
    w.v[5][:2] = [0, 1]
    run("v_ffbh_u32_e32 v6, v5", w)
    assert w.v[6][0] == 0xFFFFFFFF and w.v[6][1] == 31
    run("v_ashrrev_i32_e32 v7, 4, v1", w)
    assert np.all(w.v[7] == 0xFF0F0F0F)
    run("v_lshrrev_b32_e32 v7, 36, v1", w)                          # amount uses bits 4:0
    assert np.all(w.v[7] == 0x0F0F0F0F)
    run("v_add3_u32 v8, v1, v2, 0x7fff", w)
    assert np.all(w.v[8] == (0xF0F0F0F0 + 0x12345678 + 0x7FFF) & 0xFFFFFFFF)
    run("v_add_u32_e64 v8, v1, v1 clamp", w)
    assert np.all(w.v[8] == 0xFFFFFFFF)
    run("v_mul_hi_i32 v9, v1, -2", w)
    assert np.all(w.v[9].view(np.int32) == (np.int64(np.int32(-252645136)) * -2) >> 32)
    run("v_bitop3_b32 v10, v1, v2, 0 bitop3:0xf0", w, "gfx950")     # table 0xf0 = S0
    assert np.all(w.v[10] == 0xF0F0F0F0)
    run("v_bitop3_b32 v10, v1, v2, 0 bitop3:0xcc", w, "gfx950")     # 0xcc = S1
    assert np.all(w.v[10] == 0x12345678)
    run("v_bcnt_u32_b32 v11, v1, 3", w)
    assert np.all(w.v[11] == 19)


def test_bf16_software_sequence() -> None:
    # the compiler's f32 -> bf16 integer sequence (isa_notes §5.7) gives the same bits as RNE
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -3.14159, 1e-39] * 16, np.float32)
    w = wave()
    w.v[1] = f32(x)
    w.s[9] = 0x7FFF                                # gfx9 has no VOP3 literal: the constant comes from an SGPR
    run("v_bfe_u32 v2, v1, 16, 1", w)
    run("v_add3_u32 v2, v2, v1, s9", w)
    run("v_lshrrev_b32_e32 v2, 16, v2", w)
    assert np.array_equal(w.v[2], x.astype(ml_dtypes.bfloat16).view(np.uint16))


# ---------------------------------------------------------------------------
# packed and mixed precision


def test_pk_f16_hsub2_and_constants() -> None:
    w = wave("gfx1100")
    w.v[24][:] = (h16(np.float16(5.0)) << 16) | h16(np.float16(3.0))
    w.v[18][:] = (h16(np.float16(1.0)) << 16) | h16(np.float16(0.5))
    run("v_pk_add_f16 v19, v24, v18 op_sel_hi:[1,1] neg_lo:[0,1] neg_hi:[0,1]", w, "gfx1100")   # __hsub2
    assert np.all(w.v[19] == (h16(np.float16(4.0)) << 16) | h16(np.float16(2.5)))
    run("v_pk_add_f16 v23, 0x5400, v18 op_sel_hi:[0,1]", w, "gfx1100")   # literal low half used for both
    assert np.all(w.v[23] == (h16(np.float16(65.0)) << 16) | h16(np.float16(64.5)))
    run("v_pk_mul_f16 v20, 2.0, v18 op_sel_hi:[0,1]", w, "gfx1100")      # inline constant as f16 bits
    assert np.all(w.v[20] == (h16(np.float16(2.0)) << 16) | h16(np.float16(1.0)))
    with pytest.raises(EmulatorError, match="inline constant"):
        decode("v_pk_mul_f16 v20, 2.0, v18", "gfx1100")                  # high half of an inline constant
    run("v_pk_fma_f16 v14, v24, v18, v18 op_sel:[1,0,0] op_sel_hi:[0,1,1]", w, "gfx1100")
    lo = np.float16(5.0 * 0.5 + 0.5)
    hi = np.float16(3.0 * 1.0 + 1.0)
    assert np.all(w.v[14] == (h16(hi) << 16) | h16(lo))


def test_pk_f32_ops_gfx9() -> None:
    w = wave()
    w.v[18][:], w.v[19][:] = f32(2.0), f32(3.0)
    w.v[34][:], w.v[35][:] = f32(10.0), f32(100.0)
    w.v[2][:], w.v[3][:] = f32(1.0), f32(-1.0)
    run("v_pk_fma_f32 v[2:3], v[18:19], v[34:35], v[2:3] op_sel_hi:[1,0,1]", w)   # S1 word 0 for both
    assert np.all(as_f32(w.v[2]) == 21.0) and np.all(as_f32(w.v[3]) == 29.0)
    run("v_pk_add_f32 v[4:5], v[18:19], v[34:35] op_sel:[1,0] op_sel_hi:[0,1]", w)  # swap S0 words
    assert np.all(as_f32(w.v[4]) == 13.0) and np.all(as_f32(w.v[5]) == 102.0)
    run("v_pk_mov_b32 v[6:7], v[18:19], v[34:35] op_sel:[1,0]", w)
    assert np.all(as_f32(w.v[6]) == 3.0) and np.all(as_f32(w.v[7]) == 10.0)
    w = wave("gfx942", exec_mask=(1 << 64) - 1 - (1 << 7))              # lane 7 inactive: keeps its words
    w.v[18][:], w.v[19][:] = f32(2.0), f32(3.0)
    w.v[34][:], w.v[35][:] = f32(10.0), f32(100.0)
    w.v[8][:], w.v[9][:] = f32(5.0), f32(6.0)
    run("v_pk_mul_f32 v[8:9], v[18:19], v[34:35] neg_lo:[1,0] neg_hi:[0,1]", w)
    active = np.arange(64) != 7
    assert np.all(as_f32(w.v[8])[active] == -20.0) and np.all(as_f32(w.v[9])[active] == -300.0)
    assert as_f32(w.v[8])[7] == 5.0 and as_f32(w.v[9])[7] == 6.0


def test_fma_mix_f32() -> None:
    w = wave("gfx942")
    w.v[28][:] = (h16(np.float16(3.0)) << 16) | h16(np.float16(1.5))
    w.v[29][:] = (h16(np.float16(-2.0)) << 16) | h16(np.float16(4.0))
    w.v[1][:] = f32(0.25)
    run("v_fma_mix_f32 v1, v28, v29, v1 op_sel_hi:[1,1,0]", w)           # f16 x f16 + f32
    assert np.all(as_f32(w.v[1]) == 6.25)
    run("v_fma_mix_f32 v2, v28, v29, v1 op_sel:[1,1,0] op_sel_hi:[1,1,0]", w)
    assert np.all(as_f32(w.v[2]) == -6.0 + 6.25)
    run("v_fma_mix_f32 v3, v1, v1, v1", w)                               # no op_sel_hi: all f32
    assert np.all(as_f32(w.v[3]) == 6.25 * 6.25 + 6.25)
    w11 = wave("gfx1100")
    w11.v[28], w11.v[29], w11.v[1] = w.v[28][:32], w.v[29][:32], f32(np.full(32, 0.25, np.float32))
    w11.v[4][:] = 0xAAAA0000
    run("v_fma_mixlo_f16 v4, v28, v29, -v1 op_sel_hi:[1,1,0]", w11, "gfx1100")
    assert np.all(w11.v[4] == 0xAAAA0000 | int(h16(np.float16(5.75))))


def _mix_f16_forms():
    for arch in ARCH:
        for half in ("lo", "hi"):
            yield pytest.param(arch, f"v_fma_mix{half}_f16", id=f"{arch}-fma_mix{half}")
            if ARCH[arch][0] == 9:            # the emulator also takes the older CDNA spelling
                yield pytest.param(arch, f"v_mad_mix{half}_f16", id=f"{arch}-mad_mix{half}")


def _write_half(old: int, r: int, mnemonic: str) -> int:
    """The destination word after a mixlo (bits 15:0) / mixhi (bits 31:16) write of f16 bits r."""
    return (old & 0xFFFF0000) | r if "mixlo" in mnemonic else (r << 16) | (old & 0xFFFF)


# The fma of a mixlo/mixhi is an f32 operation whose result is then rounded to f16 (two roundings).
# Each case's exact value lies next to an f16 tie that the f32 rounding lands on exactly.
@pytest.mark.parametrize("sources,s0,s1,s2,expect", [
    # 1 + 2^-11 + 2^-40 -> f32 1 + 2^-11 (f16 tie) -> 1.0; rounded once: 0x3c01
    pytest.param("v1, v2, v3", 2.0 ** -20, 2.0 ** -20, 1 + 2.0 ** -11, 0x3C00, id="2^-20*2^-20+(1+2^-11)=3c00"),
    # 1 + 3*2^-11 - 2^-40 -> f32 1 + 3*2^-11 (tie) -> 1 + 2^-9; rounded once: 0x3c01 (S0 negated by modifier)
    pytest.param("-v1, v2, v3", 2.0 ** -20, 2.0 ** -20, 1 + 3 * 2.0 ** -11, 0x3C02,
                 id="-2^-20*2^-20+(1+3*2^-11)=3c02"),
    # f16 sources (S1 from the high half): 1 + 2^-11 + 2^-24 -> f32 tie, even 1 + 2^-11 -> 1.0; once: 0x3c01
    pytest.param("v5, v5, v3 op_sel:[0,1,0] op_sel_hi:[1,1,0]", None, None, 1 + 2.0 ** -11, 0x3C00,
                 id="f16:2^-12*2^-12+(1+2^-11)=3c00"),
])
@pytest.mark.parametrize("arch,mnemonic", list(_mix_f16_forms()))
def test_fma_mix_f16_rounds_to_f32_then_f16(arch, mnemonic, sources, s0, s1, s2, expect) -> None:
    w = wave(arch)
    if s0 is not None:
        w.v[1][:], w.v[2][:] = f32(s0), f32(s1)
    w.v[5][:] = h16(np.float16(2.0 ** -12)) * 0x10001
    w.v[3][:] = f32(s2)
    w.v[4][:] = 0xAAAA5555
    run(f"{mnemonic} v4, {sources}", w, arch)
    assert np.all(w.v[4] == _write_half(0xAAAA5555, expect, mnemonic))


@pytest.mark.parametrize("arch", list(ARCH))
def test_fma_mix_f16_two_roundings_random_wave_against_exact_reference(arch) -> None:
    rng = np.random.default_rng(22)
    n = ARCH[arch][1]
    differs = 0                              # lanes where a single rounding would have given another f16
    for _ in range(16):
        # S2 within a few f32 ulps of an f16 tie (normal and denormal f16 results), S0 * S1 within a few f32
        # ulps of S2, so both roundings matter; a quarter of the lanes are plain random values
        m = np.float16(np.ldexp(1 + rng.integers(0, 1024, n) / 1024, rng.integers(-20, 15, n)))
        tie = (m.astype(np.float64) + np.spacing(m).astype(np.float64) / 2).astype(np.float32)
        ulp = np.spacing(tie).astype(np.float64)
        c = (tie + rng.integers(-2, 3, n) * ulp).astype(np.float32) * np.where(rng.random(n) < .5, -1, 1)
        a = np.ldexp(1 + rng.random(n), rng.integers(-12, 12, n)).astype(np.float32)
        prod = ulp * np.ldexp(1 + rng.random(n), rng.integers(-3, 2, n)) * np.where(rng.random(n) < .5, -1, 1)
        b = (prod / a).astype(np.float32)
        plain = rng.random(n) < .25
        a = np.where(plain, rng.uniform(-8, 8, n), a).astype(np.float32)
        b = np.where(plain, rng.uniform(-8, 8, n), b).astype(np.float32)
        c = np.where(plain, rng.uniform(-64, 64, n), c).astype(np.float32)
        w = wave(arch)
        w.v[1], w.v[2], w.v[3] = f32(a), f32(b), f32(c)
        w.v[4][:] = 0x12345678
        run("v_fma_mixlo_f16 v4, v1, v2, v3", w, arch)
        run("v_fma_mixhi_f16 v4, v1, v2, v3", w, arch)
        for i in range(n):
            exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
            r = np.float16(_round_exact(Fraction(_round_exact(exact)), np.float16))
            bits = int(h16(r))
            assert w.v[4][i] == (bits << 16) | bits, (a[i], b[i], c[i])
            differs += bits != int(h16(np.float16(_round_exact(exact, np.float16))))
    assert differs >= 10, "too few lanes tell two roundings from one"


# ---------------------------------------------------------------------------
# cross-lane


def test_readlane_readfirstlane_writelane_mbcnt() -> None:
    w = wave("gfx942", exec_mask=0xF0)
    w.v[1] = np.arange(64, dtype=np.uint32) * 3
    run("v_readfirstlane_b32 s4, v1", w)
    assert w.s[4] == 12
    run("v_readlane_b32 s5, v1, 63", w)                             # EXEC ignored
    assert w.s[5] == 189
    w.s[6] = 0xAB
    run("v_writelane_b32 v1, s6, 2", w)
    assert w.v[1][2] == 0xAB
    w.set_exec((1 << 64) - 1)
    run("v_mbcnt_lo_u32_b32 v2, -1, 0", w)
    run("v_mbcnt_hi_u32_b32 v2, -1, v2", w)
    assert np.array_equal(w.v[2], np.arange(64))
    w.set_exec(0)
    run("v_readfirstlane_b32 s4, v1", w)
    assert w.s[4] == 0


def test_permlanex16_and_permlane64() -> None:
    w = wave("gfx1100")
    w.v[1] = np.arange(32, dtype=np.uint32)
    w.s[0], w.s[1] = 0x76543210, 0xFEDCBA98
    run("v_permlanex16_b32 v2, v1, s0, s1", w, "gfx1100")            # identity selector, other row
    assert np.array_equal(w.v[2], np.arange(32) ^ 16)
    run("v_permlanex16_b32 v2, v1, 0, 0", w, "gfx1100")               # everybody reads lane 0 of the other row
    assert np.array_equal(w.v[2], np.where(np.arange(32) < 16, 16, 0))
    w64 = wave("gfx942")
    w64.v[1] = np.arange(64, dtype=np.uint32)
    with pytest.raises(EmulatorError):
        run("v_permlane64_b32 v2, v1", w, "gfx1100")                  # ISA says NOP, compiler expects copy
    run("v_permlane64_b32 v2, v1", w, "gfx1100", permlane64_wave32="copy")
    assert np.array_equal(w.v[2], w.v[1])


# ---------------------------------------------------------------------------
# division and transcendental ops


def _div_sequence(arch: str, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """The compiler's f32 division (from the gfx942/gfx1201 listings), num/den in v3/v8."""
    w = wave(arch)
    n = w.n
    w.v[3], w.v[8] = f32(num[:n]), f32(den[:n])
    for t in ("v_div_scale_f32 v10, s[2:3], v8, v8, v3", "v_rcp_f32_e32 v11, v10",
              "v_fma_f32 v7, -v10, v11, 1.0", "v_fmac_f32_e32 v11, v7, v11",
              "v_div_scale_f32 v7, vcc, v3, v8, v3", "v_mul_f32_e32 v12, v7, v11",
              "v_fma_f32 v13, -v10, v12, v7", "v_fmac_f32_e32 v12, v13, v11",
              "v_fma_f32 v10, -v10, v12, v7", "v_div_fmas_f32 v10, v10, v11, v12",
              "v_div_fixup_f32 v1, v10, v8, v3"):
        if n == 32:
            t = t.replace("s[2:3]", "s2").replace("vcc,", "vcc_lo,")
        run(t, w, arch)
    return as_f32(w.v[1])


def test_division_sequence_is_correctly_rounded_across_the_range() -> None:
    rng = np.random.default_rng(5)
    e = np.arange(-149, 128)
    ea, eb = np.meshgrid(e[::3], e[::3])
    ea, eb = ea.ravel(), eb.ravel()
    num = (rng.uniform(1, 2, ea.size) * 2.0 ** ea.astype(np.float64)).astype(np.float32)
    den = (rng.uniform(1, 2, eb.size) * 2.0 ** eb.astype(np.float64)).astype(np.float32) * \
        np.where(rng.random(eb.size) < 0.5, -1, 1).astype(np.float32)
    specials = np.array([[0, 1], [1, 0], [0, 0], [np.inf, 2], [2, np.inf], [np.inf, np.inf], [np.nan, 1],
                         [1, np.nan], [-0.0, 3], [7, -0.0], [1e-45, 3e38], [3e38, 1e-45], [1, 3]], np.float32)
    num = np.concatenate([num, specials[:, 0]])
    den = np.concatenate([den, specials[:, 1]])
    pad = (-num.size) % 64
    num, den = np.concatenate([num, np.ones(pad, np.float32)]), np.concatenate([den, np.ones(pad, np.float32)])
    with np.errstate(all="ignore"):
        expect = num / den
    got = np.concatenate([_div_sequence("gfx942", num[i:i + 64], den[i:i + 64]) for i in range(0, num.size, 64)])
    bad = ~((got.view(np.uint32) == expect.view(np.uint32)) | (np.isnan(got) & np.isnan(expect)))
    assert not bad.any(), list(zip(num[bad][:5], den[bad][:5], got[bad][:5], expect[bad][:5], strict=True))
    got32 = _div_sequence("gfx1201", num[:32], den[:32])
    assert np.array_equal(got32.view(np.uint32), expect[:32].view(np.uint32))


def test_transcendentals() -> None:
    w = wave()
    w.v[1] = f32(np.array([0.25, -130.0, 10.0, 0.0, -1.0, np.inf, 1.5, -0.0] * 8, np.float32))
    run("v_exp_f32_e32 v2, v1", w)
    r = as_f32(w.v[2])[:8]
    assert r[0] == np.float32(2 ** 0.25) and r[1] == 0.0 and r[2] == 1024.0 and r[3] == 1.0   # 2^-130 flushed
    run("v_rcp_f32_e32 v3, v1", w)
    r = as_f32(w.v[3])[:8]
    assert r[0] == 4.0 and np.isposinf(r[3]) and r[5] == 0.0 and np.isneginf(r[7])
    run("v_log_f32_e32 v4, v1", w)
    r = as_f32(w.v[4])[:8]
    assert r[0] == -2.0 and np.isneginf(r[3]) and np.isnan(r[4])
    run("v_sin_f32_e32 v5, v1", w)                                  # revolutions: sin(2*pi*0.25) = 1
    r = as_f32(w.v[5])[:8]
    assert r[0] == 1.0 and abs(r[6]) < 1e-6
    run("v_rsq_f32_e32 v6, v1", w)
    assert as_f32(w.v[6])[0] == 2.0
    w.v[7][:] = 1                                                   # denormal input flushed: rcp -> inf
    run("v_rcp_f32_e32 v8, v7", w)
    assert np.all(np.isposinf(as_f32(w.v[8])))
    w12 = wave("gfx1201")
    w12.s[1] = int(f32(4.0))
    run("v_s_rsq_f32 s0, s1", w12, "gfx1201")
    assert as_f32(np.array([w12.s[0]]))[0] == 0.5


def test_ldexp_frexp_fract_rndne() -> None:
    w = wave()
    w.v[1] = f32(np.array([1.5, -2.5, 2.5, 0.5, -0.7, 1e-45, np.inf, 3.0] * 8, np.float32))
    w.v[2][:] = np.uint32(-130 & 0xFFFFFFFF)
    run("v_ldexp_f32 v3, v1, v2", w)
    assert as_f32(w.v[3])[0] == np.float32(1.5 * 2.0 ** -130)       # denormal, exact
    run("v_rndne_f32_e32 v4, v1", w)
    assert list(as_f32(w.v[4])[:5]) == [2.0, -2.0, 2.0, 0.0, -1.0]
    run("v_frexp_mant_f32_e64 v5, v1", w)
    run("v_frexp_exp_i32_f32_e32 v6, v1", w)
    assert as_f32(w.v[5])[7] == 0.75 and w.v[6][7] == 2 and w.v[6][6] == 0
    run("v_fract_f32_e32 v7, v1", w)
    assert as_f32(w.v[7])[4] == np.float32(-0.7) + 1 and np.isnan(as_f32(w.v[7])[6])


# ---------------------------------------------------------------------------
# decode-time errors


@pytest.mark.parametrize("text,arch", [
    ("v_add_f32_e64 v1, v2, v3 foo:1", "gfx942"),                   # unknown modifier
    ("v_add_f32_dpp v1, s2, v3 row_shr:1 row_mask:0xf bank_mask:0xf", "gfx942"),   # DPP source must be a VGPR
    ("v_add_f32_e32 v1, v2", "gfx942"),                             # missing operand
    ("v_and_b32_e64 v1, -v2, v3", "gfx942"),                        # float modifier on an integer op
    ("v_add_f32_e32 v1, v2, v3 row_shr:1", "gfx942"),               # DPP control without _dpp
    ("v_mov_b32_dpp v1, v2 row_shr:1 quad_perm:[0,1,2,3]", "gfx942"),   # two DPP controls
    ("v_lshlrev_b32_e64 v1, v2, v3 mul:2", "gfx942"),               # omod on an integer op
    ("v_cmp_eq_u32_dpp vcc_lo, v1, v2 row_shr:1", "gfx1100"),       # DPP compares not implemented
    ("v_fma_mix_f32 v1, v2, v3, v4 op_sel:[0,0,1]", "gfx942"),      # op_sel on an f32 mix source
])
def test_unsupported_forms_raise_at_decode(text: str, arch: str) -> None:
    with pytest.raises(EmulatorError):
        decode(text, arch)


def test_gemv_listings_decode_and_run() -> None:
    """Every VALU line of the shipped GEMV code objects decodes and runs on random registers."""
    from hipskinny import registry
    from hipskinny.codeobject import CodeObject
    from hipskinny.emulator.listing import read_table

    seen = 0
    for arch in ARCH:
        image, entry = registry.read_verified(arch, "gemv")
        listing, _ = read_table((paths.REPO / "hsaco" / entry["instructions"]).read_bytes(), CodeObject.parse(image))
        rng = np.random.default_rng(6)
        lines = {inst.text for inst in listing if inst.text.startswith("v_")}
        for text in sorted(lines):
            w = wave(arch)
            w.v[:] = rng.integers(0, 2 ** 32, w.v.shape, dtype=np.uint64).astype(np.uint32)
            w.s[:100] = rng.integers(0, 2 ** 32, 100, dtype=np.uint64).astype(np.uint32)
            run(text, w, arch)
            seen += 1
    assert seen > 1000


def test_f64_division_sequence() -> None:
    """The compiler's f64 division (gfx942 listing) across the exponent range, incl. denormals."""
    rng = np.random.default_rng(7)
    ea = rng.integers(-1074, 1024, 128)
    eb = rng.integers(-1074, 1024, 128)
    num = rng.uniform(1, 2, 128) * np.exp2(ea.astype(np.float64))
    den = rng.uniform(1, 2, 128) * np.exp2(eb.astype(np.float64)) * np.where(rng.random(128) < 0.5, -1, 1)
    num[:4] = [1.0, 0.0, 5e-324, 1.7e308]
    den[:4] = [3.0, 2.0, 3.0, 1e-300]
    for i in range(0, 128, 64):
        w = wave()
        pair = num[i:i + 64].view(np.uint32).reshape(-1, 2)
        w.v[2], w.v[3] = pair[:, 0], pair[:, 1]
        pair = den[i:i + 64].view(np.uint32).reshape(-1, 2)
        w.v[4], w.v[5] = pair[:, 0], pair[:, 1]
        for t in ("v_div_scale_f64 v[14:15], s[0:1], v[4:5], v[4:5], v[2:3]", "v_rcp_f64_e32 v[22:23], v[14:15]",
                  "v_fma_f64 v[26:27], -v[14:15], v[22:23], 1.0", "v_fmac_f64_e32 v[22:23], v[22:23], v[26:27]",
                  "v_fma_f64 v[26:27], -v[14:15], v[22:23], 1.0", "v_fmac_f64_e32 v[22:23], v[22:23], v[26:27]",
                  "v_div_scale_f64 v[16:17], vcc, v[2:3], v[4:5], v[2:3]", "v_mul_f64 v[26:27], v[16:17], v[22:23]",
                  "v_fma_f64 v[14:15], -v[14:15], v[26:27], v[16:17]",
                  "v_div_fmas_f64 v[14:15], v[14:15], v[22:23], v[26:27]",
                  "v_div_fixup_f64 v[0:1], v[14:15], v[4:5], v[2:3]"):
            run(t, w)
        got = (w.v[0].astype(np.uint64) | (w.v[1].astype(np.uint64) << np.uint64(32))).view(np.float64)
        with np.errstate(all="ignore"):
            expect = num[i:i + 64] / den[i:i + 64]
        assert np.array_equal(got, expect), [(a, b, g, e) for a, b, g, e in
                                             zip(num[i:i + 64], den[i:i + 64], got, expect, strict=True) if g != e][:3]


def test_gfx9_cmpx_writes_sgpr_and_exec() -> None:
    w = wave("gfx942")
    w.v[1] = np.arange(64, dtype=np.uint32)
    run("v_cmpx_gt_u32_e32 vcc, 40, v1", w)
    assert w.sget(VCC_LO, 2) == (1 << 40) - 1 and w.exec_value() == (1 << 40) - 1
    with pytest.raises(EmulatorError):
        decode("v_cmpx_gt_u32_e64 s0, 40, v1", "gfx1100")      # gfx10+ cmpx has no SGPR destination


def test_single_byte_fp8_select() -> None:
    w = wave("gfx942")
    w.v[6][:] = 0x00400000                         # FNUZ 0x40 = 1.0 in byte 2
    run("v_cvt_f32_fp8_sdwa v9, v6 src0_sel:BYTE_2", w)
    assert np.all(as_f32(w.v[9]) == 1.0)
    w12 = wave("gfx1201")
    w12.v[6][:] = 0x00400000                       # OCP 0x40 = 2.0
    run("v_cvt_f32_fp8_e64 v3, v6 byte_sel:2", w12, "gfx1201")
    assert np.all(as_f32(w12.v[3]) == 2.0)
    run("v_cvt_f32_fp8_e64 v3, v6", w12, "gfx1201")
    assert np.all(as_f32(w12.v[3]) == 0.0)


def test_agpr_moves_and_swap() -> None:
    w = wave("gfx942", exec_mask=0xFFFF)
    w.v[1][:], w.v[2][:] = 5, 9
    run("v_accvgpr_write_b32 a3, v1", w)
    run("v_accvgpr_read_b32 v4, a3", w)
    assert np.all(w.v[4][:16] == 5) and np.all(w.v[4][16:] == 0)
    run("v_swap_b32 v1, v2", w)
    assert np.all(w.v[1][:16] == 9) and np.all(w.v[2][:16] == 5) and np.all(w.v[1][16:] == 5)


@pytest.mark.parametrize("text,arch", [
    ("v_or_b32_sdwa v3, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD", "gfx1100"),
    ("v_add_f32_e64 v1, v2, v3 op_sel:[0,0,1]", "gfx1201"),         # destination half of a 32-bit result
    ("v_add_f32_dpp v1, v4, v4 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0", "gfx942"),
    ("v_pk_add_f16 v1, -v2, v3", "gfx942"),                       # packed ops spell negation neg_lo/neg_hi
    ("v_cvt_pk_f32_fp8_e32 v[0:1], v2", "gfx1151"),               # no hardware fp8 on gfx1151
])
def test_more_unsupported_forms_raise(text: str, arch: str) -> None:
    with pytest.raises(EmulatorError):
        decode(text, arch)


def test_f16_arith_and_packed_fma_rounding() -> None:
    w = wave("gfx942")
    # (1+2^-10)^2 + 2^-11 + 2^-24 per half, fused: 1 + 2^-9 + 2^-10 (unfused would give 1 + 2^-9)
    x = h16(np.float16(1 + 2.0 ** -10))
    y = h16(np.float16(2.0 ** -11 + 2.0 ** -24))
    w.v[1][:], w.v[2][:] = x | (x << 16), y | (y << 16)
    run("v_pk_fma_f16 v3, v1, v1, v2", w)
    e = int(h16(np.float16(1 + 2.0 ** -9 + 2.0 ** -10)))
    assert np.all(w.v[3] == e | (e << 16))
    w.v[4][:] = h16(np.float16(60000.0))
    run("v_add_f16_e32 v5, v4, v4", w)                              # overflow -> inf
    assert np.all(w.v[5] == 0x7C00)
    run("v_max_f16_e32 v5, v4, v1", w)
    assert np.all(w.v[5] == int(h16(np.float16(60000.0))))
