"""Lane-wise VALU arithmetic: f32/f16/f64 float ops, integer and bit ops, compares,
the division helpers and the transcendental unit. Each op is a `Spec` (valu_vop)
whose function gets typed numpy arrays (one element per lane)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import fp
from .valu_vop import Spec, vop

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64
M32 = 0xFFFFFFFF


def _u64(x: Any) -> np.ndarray:
    return np.asarray(x).astype(U64)


def _i64(x: Any) -> np.ndarray:
    return np.asarray(x).astype(I64)


def _d(x: Any) -> np.ndarray:
    return np.asarray(x).astype(F64)


def _f32(x: Any) -> np.ndarray:
    return fp.quiet(np.asarray(x).astype(F32))


def _f16(x: Any) -> np.ndarray:
    return fp.to_f16(x)


# ---------------------------------------------------------------------------
# f32

vop("v_add_f32", Spec("f32", ("f32", "f32"), lambda a, b: a + b))
vop("v_sub_f32", Spec("f32", ("f32", "f32"), lambda a, b: a - b))
vop("v_subrev_f32", Spec("f32", ("f32", "f32"), lambda a, b: b - a))
vop("v_mul_f32", Spec("f32", ("f32", "f32"), lambda a, b: a * b))
vop("v_fma_f32", Spec("f32", ("f32", "f32", "f32"), fp.fma_f32))
# fmaak: D = S0*S1 + K, fmamk: D = S0*K + S1 – both an fma of the operands in printed order
vop("v_fmaak_f32 v_fmamk_f32", Spec("f32", ("f32", "f32", "f32"), fp.fma_f32))
vop("v_fmac_f32", Spec("f32", ("f32", "f32", "f32"), fp.fma_f32, acc=True))


def _dx9_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # DX9 rule: 0 * anything (inf, NaN included) is +0
    return np.where((a == 0) | (b == 0), a.dtype.type(0), a * b)


vop("v_mul_legacy_f32 v_mul_dx9_zero_f32", Spec("f32", ("f32", "f32"), _dx9_mul))


def _mad_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    # unfused legacy mad/mac: product and sum rounded separately, f32 denormals flushed (GCN MAD rule)
    fd = fp.flush_denorm
    return fd(fd(fd(a) * fd(b)) + fd(c))


vop("v_mad_f32", Spec("f32", ("f32", "f32", "f32"), _mad_f32))
vop("v_mac_f32", Spec("f32", ("f32", "f32", "f32"), _mad_f32, acc=True))
vop("v_fma_legacy_f32 v_fma_dx9_zero_f32",
    Spec("f32", ("f32", "f32", "f32"), lambda a, b, c: np.where((a == 0) | (b == 0), c + F32(0),
                                                                  fp.fma_f32(a, b, c))))


def _minmax(kind: str, is_max: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    f = {"ieee": fp.minmax_ieee, "num": fp.minmax_num, "nan": fp.minmax_nan}[kind]
    return lambda a, b: f(a, b, is_max)


def _minmax3(kind: str, is_max: bool) -> Callable[..., np.ndarray]:
    f = _minmax(kind, is_max)
    return lambda a, b, c: f(f(a, b), c)


def _med3(kind: str) -> Callable[..., np.ndarray]:
    mn, mx, mn3 = _minmax(kind, False), _minmax(kind, True), _minmax3(kind, False)

    def med3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        # any NaN: the min3 of the inputs (isa_notes §5.4); otherwise the middle value
        nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
        return np.where(nan, mn3(a, b, c), mx(mn(a, b), mn(mx(a, b), c)))
    return med3


for _t in ("f32", "f16", "f64"):
    for _kind, _pfx in (("ieee", ""), ("num", "_num"), ("nan", "imum")):
        if _kind == "nan":
            _names = (f"v_maximum_{_t}", f"v_minimum_{_t}")
        else:
            _names = (f"v_max{_pfx}_{_t}", f"v_min{_pfx}_{_t}")
        vop(_names[0], Spec(_t, (_t, _t), _minmax(_kind, True)))
        vop(_names[1], Spec(_t, (_t, _t), _minmax(_kind, False)))
        if _t == "f64":
            continue
        if _kind == "nan":
            vop(f"v_maximum3_{_t}", Spec(_t, (_t,) * 3, _minmax3(_kind, True)))
            vop(f"v_minimum3_{_t}", Spec(_t, (_t,) * 3, _minmax3(_kind, False)))
        else:
            vop(f"v_max3{_pfx}_{_t}", Spec(_t, (_t,) * 3, _minmax3(_kind, True)))
            vop(f"v_min3{_pfx}_{_t}", Spec(_t, (_t,) * 3, _minmax3(_kind, False)))
            vop(f"v_med3{_pfx}_{_t}", Spec(_t, (_t,) * 3, _med3(_kind)))


def _chain(first: Callable[..., np.ndarray], second: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda a, b, c: second(first(a, b), c)


# gfx11/gfx12 fused pairs: v_maxmin = min(max(S0, S1), S2), v_minmax = max(min(S0, S1), S2)
for _t in ("f32", "f16"):
    for _kind, _sfx in (("ieee", ""), ("num", "_num")):
        vop(f"v_maxmin{_sfx}_{_t}", Spec(_t, (_t,) * 3, _chain(_minmax(_kind, True), _minmax(_kind, False))))
        vop(f"v_minmax{_sfx}_{_t}", Spec(_t, (_t,) * 3, _chain(_minmax(_kind, False), _minmax(_kind, True))))
for _t in ("i32", "u32"):
    vop(f"v_maxmin_{_t}", Spec(_t, (_t,) * 3, _chain(np.maximum, np.minimum)))
    vop(f"v_minmax_{_t}", Spec(_t, (_t,) * 3, _chain(np.minimum, np.maximum)))


def _ldexp(dtype: type) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def ldexp(a: np.ndarray, e: np.ndarray) -> np.ndarray:
        # exact in f64 for f16/f32 (one rounding on the cast); exponent clipped far beyond any result range
        e = np.clip(_i64(e), -2200, 2200)
        if dtype is F64:
            return fp.quiet(np.ldexp(a, e))
        r = np.ldexp(_d(a), e)
        return fp.to_f16(r) if dtype is F16 else _f32(r)
    return ldexp


vop("v_ldexp_f32", Spec("f32", ("f32", "i32"), _ldexp(F32)))
vop("v_ldexp_f16", Spec("f16", ("f16", "i16"), _ldexp(F16)))
vop("v_ldexp_f64", Spec("f64", ("f64", "i32"), _ldexp(F64)))


def _frexp_mant(a: np.ndarray) -> np.ndarray:
    m, _ = np.frexp(a)
    return fp.quiet(np.where(np.isfinite(a), m.astype(a.dtype), a))


def _frexp_exp(dt: type) -> Callable[[np.ndarray], np.ndarray]:
    def f(a: np.ndarray) -> np.ndarray:
        _, e = np.frexp(_d(a))
        return np.where(np.isfinite(a), e, 0).astype(dt)
    return f


for _t in ("f32", "f16", "f64"):
    vop(f"v_frexp_mant_{_t}", Spec(_t, (_t,), _frexp_mant))
vop("v_frexp_exp_i32_f32", Spec("i32", ("f32",), _frexp_exp(I32)))
vop("v_frexp_exp_i32_f64", Spec("i32", ("f64",), _frexp_exp(I32)))
vop("v_frexp_exp_i16_f16", Spec("i16", ("f16",), _frexp_exp(np.int16)))


def _fract(a: np.ndarray) -> np.ndarray:
    r = a - np.floor(a)
    below_one = np.nextafter(a.dtype.type(1), a.dtype.type(0))   # 0x3f7fffff for f32
    r = np.minimum(r, below_one)
    return fp.quiet(np.where(np.isinf(a), a.dtype.type(np.nan), r))


for _t in ("f32", "f16", "f64"):
    vop(f"v_rndne_{_t}", Spec(_t, (_t,), lambda a: fp.quiet(np.rint(a))))
    vop(f"v_trunc_{_t}", Spec(_t, (_t,), lambda a: fp.quiet(np.trunc(a))))
    vop(f"v_floor_{_t}", Spec(_t, (_t,), lambda a: fp.quiet(np.floor(a))))
    vop(f"v_ceil_{_t}", Spec(_t, (_t,), lambda a: fp.quiet(np.ceil(a))))
    vop(f"v_fract_{_t}", Spec(_t, (_t,), _fract))

# ---------------------------------------------------------------------------
# f16 (computed exactly in f64, one rounding to f16)

vop("v_add_f16", Spec("f16", ("f16", "f16"), lambda a, b: _f16(_d(a) + _d(b))))
vop("v_sub_f16", Spec("f16", ("f16", "f16"), lambda a, b: _f16(_d(a) - _d(b))))
vop("v_subrev_f16", Spec("f16", ("f16", "f16"), lambda a, b: _f16(_d(b) - _d(a))))
vop("v_mul_f16", Spec("f16", ("f16", "f16"), lambda a, b: _f16(_d(a) * _d(b))))
vop("v_fma_f16", Spec("f16", ("f16", "f16", "f16"), fp.fma_f16))
vop("v_fmaak_f16 v_fmamk_f16", Spec("f16", ("f16", "f16", "f16"), fp.fma_f16))
vop("v_fmac_f16", Spec("f16", ("f16", "f16", "f16"), fp.fma_f16, acc=True, preserve16=True))
vop("v_mad_f16", Spec("f16", ("f16", "f16", "f16"), lambda a, b, c: _f16(_d(_f16(_d(a) * _d(b))) + _d(c))))
vop("v_mac_f16", Spec("f16", ("f16", "f16", "f16"), lambda a, b, c: _f16(_d(_f16(_d(a) * _d(b))) + _d(c)),
                      acc=True, preserve16=True))

# ---------------------------------------------------------------------------
# f64

vop("v_add_f64", Spec("f64", ("f64", "f64"), lambda a, b: fp.quiet(a + b)))
vop("v_mul_f64", Spec("f64", ("f64", "f64"), lambda a, b: fp.quiet(a * b)))
vop("v_fma_f64", Spec("f64", ("f64", "f64", "f64"), lambda a, b, c: fp.quiet(fp.fma_f64(a, b, c))))
vop("v_fmac_f64", Spec("f64", ("f64", "f64", "f64"), lambda a, b, c: fp.quiet(fp.fma_f64(a, b, c)), acc=True))

# ---------------------------------------------------------------------------
# moves and selects

vop("v_mov_b32", Spec("b32", ("b32",), lambda a: a))
vop("v_mov_b64", Spec("b64", ("b64",), lambda a: a))
vop("v_mov_b16", Spec("b16", ("b16",), lambda a: a))
# gfx9 accumulation registers (MFMA operands): plain 32-bit moves between the AGPR and VGPR files
vop("v_accvgpr_read_b32 v_accvgpr_write_b32 v_accvgpr_mov_b32", Spec("b32", ("b32",), lambda a: a), e64_dpp=False)
# D = mask ? S1 : S0; abs/neg act on the sign bit even though the operands are untyped
vop("v_cndmask_b32", Spec("b32", ("b32", "b32"), lambda a, b, m: np.where(m, b, a), cin="optional",
                          bitmods=True))
vop("v_cndmask_b16", Spec("b16", ("b16", "b16"), lambda a, b, m: np.where(m, b, a), cin="optional",
                          bitmods=True))

# ---------------------------------------------------------------------------
# 32-bit integer arithmetic


def _sat_u32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0, M32).astype(U32)


def _sat_i32(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -(1 << 31), (1 << 31) - 1).astype(I32)


vop("v_add_u32 v_add_nc_u32", Spec("u32", ("u32", "u32"), lambda a, b: a + b,
                                   int_clamp=lambda a, b: _sat_u32(_i64(a) + b)))
vop("v_sub_u32 v_sub_nc_u32", Spec("u32", ("u32", "u32"), lambda a, b: a - b,
                                   int_clamp=lambda a, b: _sat_u32(_i64(a) - b)))
vop("v_subrev_u32 v_subrev_nc_u32", Spec("u32", ("u32", "u32"), lambda a, b: b - a,
                                         int_clamp=lambda a, b: _sat_u32(_i64(b) - a)))
vop("v_add_i32 v_add_nc_i32", Spec("i32", ("i32", "i32"), lambda a, b: a + b,
                                   int_clamp=lambda a, b: _sat_i32(_i64(a) + b)))
vop("v_sub_i32 v_sub_nc_i32", Spec("i32", ("i32", "i32"), lambda a, b: a - b,
                                   int_clamp=lambda a, b: _sat_i32(_i64(a) - b)))


# Carry / borrow out of 32-bit unsigned arithmetic, in uint32 (wrapping) with the carry recovered by
# comparison: a + b wraps exactly when the sum is below a; a - b borrows exactly when b > a.
def _add_co(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r = a + b
    return r, r < a


def _sub_co(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return a - b, b > a


def _addc(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = a + b
    r = t + c                       # wraps only from 0xFFFFFFFF + 1
    return r, (t < a) | (r < t)


def _subb(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = a - b
    r = t - c                       # wraps only from 0 - 1
    return r, (b > a) | (r > t)


vop("v_add_co_u32", Spec("u32", ("u32", "u32"), _add_co, sdst=True))
vop("v_sub_co_u32", Spec("u32", ("u32", "u32"), _sub_co, sdst=True))
vop("v_subrev_co_u32", Spec("u32", ("u32", "u32"), lambda a, b: _sub_co(b, a), sdst=True))
vop("v_addc_co_u32 v_add_co_ci_u32", Spec("u32", ("u32", "u32"), _addc, sdst=True, cin="printed"))
vop("v_subb_co_u32 v_sub_co_ci_u32", Spec("u32", ("u32", "u32"), _subb, sdst=True, cin="printed"))
vop("v_subbrev_co_u32 v_subrev_co_ci_u32",
    Spec("u32", ("u32", "u32"), lambda a, b, c: _subb(b, a, c), sdst=True, cin="printed"))


def _mad_u64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = _u64(a) * _u64(b)          # < 2^64, exact
    s = p + c                       # wraps
    return s, s < p                 # carry = bit 64


def _mad_i64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = _i64(a) * _i64(b)
    s = p + c                       # wraps
    ovf = ((p < 0) == (c < 0)) & ((s < 0) != (p < 0))
    return s, np.where(ovf, p < 0, s < 0)     # bit 64 of the 65-bit result = its sign


vop("v_mad_u64_u32 v_mad_co_u64_u32", Spec("u64", ("u32", "u32", "u64"), _mad_u64, sdst=True))
vop("v_mad_i64_i32 v_mad_co_i64_i32", Spec("i64", ("i32", "i32", "i64"), _mad_i64, sdst=True))

vop("v_mul_lo_u32 v_mul_lo_i32", Spec("u32", ("u32", "u32"), lambda a, b: (_u64(a) * b) & M32))
vop("v_mul_hi_u32", Spec("u32", ("u32", "u32"), lambda a, b: (_u64(a) * b) >> 32))
vop("v_mul_hi_i32", Spec("i32", ("i32", "i32"), lambda a, b: (_i64(a) * b) >> 32))


def _s24(x: np.ndarray) -> np.ndarray:
    return ((_i64(x) & 0xFFFFFF) ^ 0x800000) - 0x800000


vop("v_mul_u32_u24", Spec("u32", ("u32", "u32"), lambda a, b: ((_u64(a) & 0xFFFFFF) * (b & 0xFFFFFF)) & M32))
vop("v_mul_hi_u32_u24", Spec("u32", ("u32", "u32"), lambda a, b: ((_u64(a) & 0xFFFFFF) * (b & 0xFFFFFF)) >> 32))
vop("v_mul_i32_i24", Spec("u32", ("u32", "u32"), lambda a, b: (_s24(a) * _s24(b)) & M32))
vop("v_mul_hi_i32_i24", Spec("i32", ("u32", "u32"), lambda a, b: (_s24(a) * _s24(b)) >> 32))
vop("v_mad_u32_u24", Spec("u32", ("u32", "u32", "u32"),
                          lambda a, b, c: ((_u64(a) & 0xFFFFFF) * (b & 0xFFFFFF) + c) & M32))
vop("v_mad_i32_i24", Spec("u32", ("u32", "u32", "u32"), lambda a, b, c: (_s24(a) * _s24(b) + _i64(c)) & M32))

vop("v_add3_u32", Spec("u32", ("u32",) * 3, lambda a, b, c: (_u64(a) + b + c) & M32))
vop("v_add_lshl_u32", Spec("u32", ("u32",) * 3, lambda a, b, c: (((_u64(a) + b) & M32) << (c & 31)) & M32))
vop("v_lshl_add_u32", Spec("u32", ("u32",) * 3, lambda a, b, c: ((_u64(a) << (b & 31)) + c) & M32))
vop("v_lshl_or_b32", Spec("b32", ("b32",) * 3, lambda a, b, c: (_u64(a) << (b & 31)) & M32 | c))
vop("v_and_or_b32", Spec("b32", ("b32",) * 3, lambda a, b, c: (a & b) | c))
vop("v_or3_b32", Spec("b32", ("b32",) * 3, lambda a, b, c: a | b | c))
vop("v_xor3_b32", Spec("b32", ("b32",) * 3, lambda a, b, c: a ^ b ^ c))
vop("v_xad_u32", Spec("u32", ("u32",) * 3, lambda a, b, c: (_u64(a ^ b) + c) & M32))
# gfx94x 64-bit address helper: the shift amount is S1[2:0] (0-7)
vop("v_lshl_add_u64", Spec("u64", ("u64", "u32", "u64"), lambda a, b, c: (a << _u64(b & 7)) + c))

for _t, _dt in (("u32", U32), ("i32", I32)):
    vop(f"v_max_{_t}", Spec(_t, (_t, _t), np.maximum))
    vop(f"v_min_{_t}", Spec(_t, (_t, _t), np.minimum))
    vop(f"v_max3_{_t}", Spec(_t, (_t,) * 3, lambda a, b, c: np.maximum(np.maximum(a, b), c)))
    vop(f"v_min3_{_t}", Spec(_t, (_t,) * 3, lambda a, b, c: np.minimum(np.minimum(a, b), c)))
    vop(f"v_med3_{_t}", Spec(_t, (_t,) * 3,
                             lambda a, b, c: np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))))

# ---------------------------------------------------------------------------
# bit operations and shifts

vop("v_and_b32", Spec("b32", ("b32", "b32"), lambda a, b: a & b))
vop("v_or_b32", Spec("b32", ("b32", "b32"), lambda a, b: a | b))
vop("v_xor_b32", Spec("b32", ("b32", "b32"), lambda a, b: a ^ b))
vop("v_xnor_b32", Spec("b32", ("b32", "b32"), lambda a, b: ~(a ^ b)))
vop("v_not_b32", Spec("b32", ("b32",), lambda a: ~a))
# the *rev shifts take the amount from the first source
vop("v_lshlrev_b32", Spec("b32", ("u32", "b32"), lambda a, b: b << (a & 31)))
vop("v_lshrrev_b32", Spec("b32", ("u32", "b32"), lambda a, b: b >> (a & 31)))
vop("v_ashrrev_i32", Spec("i32", ("u32", "i32"), lambda a, b: b >> (a & 31).astype(I32)))
vop("v_lshlrev_b64", Spec("b64", ("u32", "b64"), lambda a, b: b << _u64(a & 63)))
vop("v_lshrrev_b64", Spec("b64", ("u32", "b64"), lambda a, b: b >> _u64(a & 63)))
vop("v_ashrrev_i64", Spec("i64", ("u32", "i64"), lambda a, b: b >> _i64(a & 63)))


def _bfe_u32(a: np.ndarray, off: np.ndarray, width: np.ndarray) -> np.ndarray:
    return (a >> (off & 31)) & ((U32(1) << (width & 31)) - U32(1))


def _bfe_i32(a: np.ndarray, off: np.ndarray, width: np.ndarray) -> np.ndarray:
    w = _i64(width & 31)
    v = (_i64(a.view(I32)) >> _i64(off & 31)) & ((I64(1) << w) - 1)
    sign = I64(1) << np.maximum(w - 1, 0)
    return np.where(w == 0, 0, (v ^ sign) - sign)


vop("v_bfe_u32", Spec("u32", ("u32", "u32", "u32"), _bfe_u32))
vop("v_bfe_i32", Spec("i32", ("u32", "u32", "u32"), _bfe_i32))
vop("v_bfi_b32", Spec("b32", ("b32",) * 3, lambda a, b, c: (a & b) | (~a & c)))
vop("v_bfm_b32", Spec("b32", ("u32", "u32"),
                      lambda a, b: (((U32(1) << (a & 31)) - U32(1)) << (b & 31))))
vop("v_alignbit_b32", Spec("b32", ("b32",) * 3, lambda a, b, c: ((_u64(a) << 32 | b) >> _u64(c & 31)) & M32))
vop("v_alignbyte_b32", Spec("b32", ("b32",) * 3,
                            lambda a, b, c: ((_u64(a) << 32 | b) >> _u64(8 * (c & 3))) & M32))

_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint32)


def _bfrev(a: np.ndarray) -> np.ndarray:
    return (_REV8[a & 0xFF] << 24) | (_REV8[(a >> 8) & 0xFF] << 16) | (_REV8[(a >> 16) & 0xFF] << 8) \
        | _REV8[a >> 24]


def popcount(a: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(a).astype(U32)
    a = np.asarray(a).astype(U64)
    c = np.zeros(a.shape, U32)
    for _ in range(64):
        c += (a & 1).astype(U32)
        a = a >> 1
    return c


def _bit_length(a: np.ndarray) -> np.ndarray:
    _, e = np.frexp(_d(a))          # exact for values < 2^53
    return e


def _clz(a: np.ndarray) -> np.ndarray:
    return np.where(a == 0, -1, 32 - _bit_length(a)).astype(I32)


def _ctz(a: np.ndarray) -> np.ndarray:
    low = a & (~a + U32(1))
    return np.where(a == 0, -1, _bit_length(low) - 1).astype(I32)


def _cls(a: np.ndarray) -> np.ndarray:
    s = a.view(I32)
    y = (s ^ (s >> 31)).view(U32)
    return np.where(y == 0, -1, 32 - _bit_length(y)).astype(I32)


vop("v_bfrev_b32", Spec("b32", ("b32",), _bfrev))
vop("v_bcnt_u32_b32", Spec("u32", ("b32", "u32"), lambda a, b: popcount(a) + b))
vop("v_ffbh_u32 v_clz_i32_u32", Spec("i32", ("u32",), _clz))
vop("v_ffbl_b32 v_ctz_i32_b32", Spec("i32", ("b32",), _ctz))
vop("v_ffbh_i32 v_cls_i32", Spec("i32", ("b32",), _cls))


_PERM_ROWS: dict[int, np.ndarray] = {}


_PERM_SHUFFLES: dict[int, np.ndarray | None] = {}


def _perm_shuffle(selector: int) -> np.ndarray | None:
    """For a constant selector without sign picks (8-11): the byte of an [S1, S0, 0x0000FF00] row
    each result byte takes (0-3 S1, 4-7 S0, 8 for 0x00, 9 for 0xFF); else None."""
    if selector not in _PERM_SHUFFLES:
        picks = [(selector >> (8 * k)) & 0xFF for k in range(4)]
        ok = not any(8 <= p <= 11 for p in picks)
        _PERM_SHUFFLES[selector] = np.array([p if p < 8 else 8 if p == 12 else 9 for p in picks]) if ok else None
    return _PERM_SHUFFLES[selector]


def _perm(a: np.ndarray, b: np.ndarray, sel: np.ndarray) -> np.ndarray:
    # Selector byte k picks from a per-lane table: 0-3 bytes of S1, 4-7 bytes of S0, 8-11 the sign of
    # bytes 1,3,5,7 replicated, 12 0x00, 13 (and every selector above) 0xFF.
    a, b, sel = np.asarray(a, U32), np.asarray(b, U32), np.asarray(sel, U32)
    lanes = max(a.size, b.size, sel.size)
    if not sel.flags.writeable and sel.ndim == 1 and a.shape == b.shape == sel.shape:
        cols = _perm_shuffle(int(sel[0]))         # a constant selector (read-only: one value in every lane)
        if cols is not None:
            row = np.empty((lanes, 3), U32)
            row[:, 0], row[:, 1], row[:, 2] = b, a, 0xFF00
            return row.view(np.uint8).take(cols, axis=1).view("<u4").reshape(-1)
    table = np.empty((lanes, 14), np.uint8)
    src = table[:, :8].view("<u4")                      # little-endian: byte 0 of S1 first
    src[:, 0], src[:, 1] = b, a
    table[:, 8:12] = (table[:, 1:8:2].view(np.int8) >> 7).view(np.uint8)
    table[:, 12], table[:, 13] = 0, 0xFF
    rows = _PERM_ROWS.get(lanes)
    if rows is None:
        rows = _PERM_ROWS[lanes] = np.arange(0, 14 * lanes, 14)[:, None]
    picks = np.minimum(np.ascontiguousarray(sel, "<u4").view(np.uint8).reshape(-1, 4), 13)
    out = table.reshape(-1)[picks + rows].view("<u4").reshape(-1)
    return out.astype(U32, copy=False) if a.ndim or b.ndim or sel.ndim else out.astype(U32).reshape(())


vop("v_perm_b32", Spec("b32", ("b32",) * 3, _perm))


def _bitop3(width: int) -> Callable[..., Callable[..., np.ndarray]]:
    def make(ctx: Any, mods: dict[str, str]) -> Callable[..., np.ndarray]:
        if "bitop3" not in mods:
            raise ValueError("v_bitop3 without a bitop3: truth table")
        table = int(mods["bitop3"], 0)

        def f(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
            # bit k of the table is the result for (S0, S1, S2) = (k>>2 & 1, k>>1 & 1, k & 1)
            out = np.zeros_like(a)
            for k in range(8):
                if table >> k & 1:
                    out |= (a if k & 4 else ~a) & (b if k & 2 else ~b) & (c if k & 1 else ~c)
            return out
        return f
    return make


vop("v_bitop3_b32", Spec("b32", ("b32",) * 3, _bitop3(32), ctx_fn=True, allow=frozenset({"bitop3"})))
vop("v_bitop3_b16", Spec("b16", ("b16",) * 3, _bitop3(16), ctx_fn=True, allow=frozenset({"bitop3"})))

# ---------------------------------------------------------------------------
# 16-bit integer ops (gfx9 VOP2/VOP3, gfx11 true16)

vop("v_and_b16", Spec("b16", ("b16", "b16"), lambda a, b: a & b))
vop("v_or_b16", Spec("b16", ("b16", "b16"), lambda a, b: a | b))
vop("v_xor_b16", Spec("b16", ("b16", "b16"), lambda a, b: a ^ b))
vop("v_not_b16", Spec("b16", ("b16",), lambda a: ~a))
vop("v_add_u16 v_add_nc_u16", Spec("u16", ("u16", "u16"), lambda a, b: a + b))
vop("v_sub_u16 v_sub_nc_u16", Spec("u16", ("u16", "u16"), lambda a, b: a - b))
vop("v_subrev_u16", Spec("u16", ("u16", "u16"), lambda a, b: b - a))
vop("v_add_nc_i16", Spec("i16", ("i16", "i16"), lambda a, b: a + b))
vop("v_sub_nc_i16", Spec("i16", ("i16", "i16"), lambda a, b: a - b))
vop("v_mul_lo_u16", Spec("u16", ("u16", "u16"), lambda a, b: a * b))
vop("v_lshlrev_b16", Spec("b16", ("u16", "b16"), lambda a, b: b << (a & 15)))
vop("v_lshrrev_b16", Spec("b16", ("u16", "b16"), lambda a, b: b >> (a & 15)))
vop("v_ashrrev_i16", Spec("i16", ("u16", "i16"), lambda a, b: b >> (a & 15).astype(np.int16)))
vop("v_mad_u16", Spec("u16", ("u16",) * 3, lambda a, b, c: a * b + c))
vop("v_mad_i16", Spec("i16", ("i16",) * 3, lambda a, b, c: a * b + c))
vop("v_mad_u32_u16", Spec("u32", ("u16", "u16", "u32"), lambda a, b, c: (_u64(a) * b + c) & M32))
vop("v_mad_i32_i16", Spec("i32", ("i16", "i16", "i32"), lambda a, b, c: (_i64(a) * b + c) & M32))
for _t in ("u16", "i16"):
    vop(f"v_max_{_t}", Spec(_t, (_t, _t), np.maximum))
    vop(f"v_min_{_t}", Spec(_t, (_t, _t), np.minimum))

# ---------------------------------------------------------------------------
# compares

_FCMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "f": lambda a, b: np.zeros(np.shape(a), bool),
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "lg": lambda a, b: (a < b) | (a > b), "ge": lambda a, b: a >= b,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    # the negated forms are true when an input is NaN
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
    "tru": lambda a, b: np.ones(np.shape(a), bool), "t": lambda a, b: np.ones(np.shape(a), bool),
}
_ICMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "f": _FCMP["f"], "lt": _FCMP["lt"], "eq": _FCMP["eq"], "le": _FCMP["le"], "gt": _FCMP["gt"],
    "ne": lambda a, b: a != b, "lg": lambda a, b: a != b, "ge": _FCMP["ge"], "t": _FCMP["t"], "tru": _FCMP["t"],
}

for _x in ("v_cmp", "v_cmpx"):
    for _t in ("f16", "f32", "f64"):
        for _op, _f in _FCMP.items():
            vop(f"{_x}_{_op}_{_t}", Spec(None, (_t, _t), _f, cmp=True))
    for _t in ("i16", "u16", "i32", "u32", "i64", "u64"):
        for _op, _f in _ICMP.items():
            vop(f"{_x}_{_op}_{_t}", Spec(None, (_t, _t), _f, cmp=True))


def _class(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Class index per value: 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0, 7 +denorm, 8 +normal,
    9 +inf; true if that bit of the mask is set."""
    neg = np.signbit(a)
    tiny = np.finfo(a.dtype).tiny
    ab = np.abs(a)
    snan = fp._is_snan(a)
    idx = np.where(np.isnan(a), np.where(snan, 0, 1),
                   np.where(np.isinf(a), np.where(neg, 2, 9),
                            np.where(ab == 0, np.where(neg, 5, 6),
                                     np.where(ab < tiny, np.where(neg, 4, 7), np.where(neg, 3, 8)))))
    return ((_u64(mask) >> _u64(idx)) & 1) != 0


for _x in ("v_cmp", "v_cmpx"):
    vop(f"{_x}_class_f32", Spec(None, ("f32", "u32"), _class, cmp=True))
    vop(f"{_x}_class_f64", Spec(None, ("f64", "u32"), _class, cmp=True))
    vop(f"{_x}_class_f16", Spec(None, ("f16", "u16"), _class, cmp=True))

# ---------------------------------------------------------------------------
# division helpers (isa_notes §5.4). Own design, checked by running the compiler's
# division sequence: div_scale brings the denominator into the range where rcp is
# exact-enough and the numerator where remainders are exact; if the quotient
# itself would leave the normal range, only one operand is scaled (by 2^±K) and the
# flag tells div_fmas to undo it inside its single rounding.

_DIV = {  # K, safe den exponent, safe num exponents, safe quotient exponents, final over/underflow limits
    "f32": dict(k=64, den=(-124, 124), num=(-100, 125), q=(-120, 125), ovf=128, unf=-151),
    "f64": dict(k=128, den=(-1020, 1020), num=(-960, 1021), q=(-1000, 1021), ovf=1024, unf=-1076),
}


def _exp_of(x: np.ndarray) -> np.ndarray:
    _, e = np.frexp(_d(x))
    return _i64(e) - 1                # x = 1.m * 2^e (denormals get their true exponent)


def _div_scale(t: str) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    p = _DIV[t]
    k = p["k"]

    def f(s0: np.ndarray, den: np.ndarray, num: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ed, en = _exp_of(den), _exp_of(num)
        eq = en - ed
        done = np.zeros(ed.shape, bool)
        sd = np.zeros(ed.shape, I64)
        sn = np.zeros(ed.shape, I64)
        lo_d, hi_d = p["den"]
        lo_n, hi_n = p["num"]
        lo_q, hi_q = p["q"]
        # preference: no scaling, then equal scaling of both, then a flagged one-sided scaling
        combos = [(0, 0), (k, k), (-k, -k)] + [(a, a + k) for a in (0, k, -k)] + [(a, a - k) for a in (0, k, -k)]
        for a, b in combos:
            qd = eq + (b - a)
            ok = ((ed + a >= lo_d) & (ed + a <= hi_d) & (en + b >= lo_n) & (en + b <= hi_n)
                  & (qd >= lo_q) & (qd <= hi_q))
            if b - a > 0:
                ok &= qd <= 0                 # div_fmas scales down only when |q'| < 2
            elif b - a < 0:
                ok &= qd >= 1                 # ... and up when |q'| >= 2
            take = ok & ~done
            sd = np.where(take, a, sd)
            sn = np.where(take, b, sn)
            done |= take
            if done.all():                    # later combinations take no lane
                break
        flag = sd != sn
        is_num = (s0.view(np.uint64 if t == "f64" else U32) == num.view(np.uint64 if t == "f64" else U32)) & \
            (s0.view(np.uint64 if t == "f64" else U32) != den.view(np.uint64 if t == "f64" else U32))
        scale = np.where(is_num, sn, sd)
        d = np.ldexp(_d(s0), scale)
        special = (den == 0) | (num == 0)
        nonfinite = ~(np.isfinite(den) & np.isfinite(num))
        d = np.where(nonfinite, _d(s0), d)
        d = np.where(special & ~nonfinite, np.nan, d)
        flag = flag & ~special & ~nonfinite & done
        out = d if t == "f64" else d.astype(F32)
        return fp.quiet(out), flag
    return f


def _div_fmas(t: str) -> Callable[..., np.ndarray]:
    k = _DIV[t]["k"]

    def f(a: np.ndarray, b: np.ndarray, c: np.ndarray, vcc: np.ndarray) -> np.ndarray:
        # fma with one rounding; with the lane's VCC bit the result is also scaled by 2^±K (fused)
        up = np.abs(c) >= 2
        scale = np.where(vcc, np.where(up, k, -k), 0)
        if t == "f64":
            return fp.quiet(_fma_f64_scaled(a, b, c, scale))
        r = np.ldexp(fp.fma_rto(a, b, c), scale)     # exact power-of-two scaling of the round-to-odd value
        return _f32(r)
    return f


def _fma_f64_scaled(a: np.ndarray, b: np.ndarray, c: np.ndarray, scale: np.ndarray) -> np.ndarray:
    from fractions import Fraction
    a, b, c, scale = np.broadcast_arrays(a, b, c, scale)
    out = np.empty(a.shape, F64)
    for i in np.ndindex(a.shape):
        x, y, z, s = float(a[i]), float(b[i]), float(c[i]), int(scale[i])
        if s == 0 or not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            out[i] = fp.fma_f64(np.array([x]), np.array([y]), np.array([z]))[0] * (2.0 ** s)
            continue
        exact = (Fraction(x) * Fraction(y) + Fraction(z)) * (Fraction(2) ** s)
        if exact == 0:
            out[i] = 0.0
            continue
        try:
            out[i] = exact.numerator / exact.denominator
        except OverflowError:
            out[i] = np.inf if exact > 0 else -np.inf
    return out


def _div_fixup(t: str) -> Callable[..., np.ndarray]:
    p = _DIV.get(t)
    dt = {"f32": F32, "f64": F64, "f16": F16}[t]

    def f(q: np.ndarray, den: np.ndarray, num: np.ndarray) -> np.ndarray:
        neg = np.signbit(num) ^ np.signbit(den)
        inf = np.where(neg, -np.inf, np.inf).astype(dt)
        zero = np.where(neg, -0.0, 0.0).astype(dt)
        r = np.where(neg, -np.abs(q), np.abs(q)).astype(dt)
        r = np.where(np.isnan(q), inf, r)                    # the fma chain overflowed
        if p is not None:
            eq = _exp_of(num) - _exp_of(den)
            fin = np.isfinite(num) & np.isfinite(den) & (num != 0) & (den != 0)
            r = np.where(fin & (eq >= p["ovf"]), inf, r)
            r = np.where(fin & (eq <= p["unf"]), zero, r)
        r = np.where(np.isinf(num) & np.isfinite(den), inf, r)      # inf / y
        r = np.where((den == 0) & (num != 0), inf, r)               # x / 0
        r = np.where(np.isinf(den) & np.isfinite(num), zero, r)     # x / inf
        r = np.where((num == 0) & (den != 0), zero, r)              # 0 / y
        default_nan = dt(np.nan)
        r = np.where(((num == 0) & (den == 0)) | (np.isinf(num) & np.isinf(den)), default_nan, r)
        r = np.where(np.isnan(den), den, r)
        r = np.where(np.isnan(num), num, r)
        return fp.quiet(r.astype(dt))
    return f


for _t in ("f32", "f64"):
    vop(f"v_div_scale_{_t}", Spec(_t, (_t,) * 3, _div_scale(_t), sdst=True), e64_dpp=False)
    vop(f"v_div_fmas_{_t}", Spec(_t, (_t,) * 3, _div_fmas(_t), cin="vcc"), e64_dpp=False)
    vop(f"v_div_fixup_{_t}", Spec(_t, (_t,) * 3, _div_fixup(_t)), e64_dpp=False)
vop("v_div_fixup_f16", Spec("f16", ("f16",) * 3, _div_fixup("f16")), e64_dpp=False)

# ---------------------------------------------------------------------------
# transcendental unit: computed in f64 (well within the ~1 ulp hardware accuracy);
# f32 forms flush denormal inputs and outputs (the unit does not deliver them)


def transcendental(name: str, t: str) -> Callable[[np.ndarray], np.ndarray]:
    """The transcendental unit's ``name`` (exp, log, rcp, ...) on type ``t`` (VOP forms and gfx12's
    pseudo-scalar ones)."""
    f = _TRANS[name]
    if t == "f32":
        return lambda a: fp.flush_denorm(_f32(f(_d(fp.flush_denorm(a)))))
    if t == "f16":
        return lambda a: fp.to_f16(f(_d(a)))
    return lambda a: fp.quiet(f(_d(a)))


def _revs(g: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    # v_sin/v_cos take revolutions; reduce exactly before multiplying by 2*pi
    def f(x: np.ndarray) -> np.ndarray:
        r = x - np.round(x)
        return np.where(np.isfinite(x), g(2 * np.pi * r), np.nan)
    return f


_TRANS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp2, "log": np.log2, "rcp": lambda x: 1.0 / x, "rsq": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt, "sin": _revs(np.sin), "cos": _revs(np.cos), "rcp_iflag": lambda x: 1.0 / x,
}

for _name in _TRANS:
    vop(f"v_{_name}_f32", Spec("f32", ("f32",), transcendental(_name, "f32")), cls="trans")
    if _name != "rcp_iflag":
        vop(f"v_{_name}_f16", Spec("f16", ("f16",), transcendental(_name, "f16")), cls="trans")
for _name in ("rcp", "rsq", "sqrt"):
    vop(f"v_{_name}_f64", Spec("f64", ("f64",), transcendental(_name, "f64")), cls="trans")
