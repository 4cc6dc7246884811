"""Conversions: float <-> float (f16, bf16, f32, f64), float <-> integer, packing
forms, and the fp8/bf8 conversions whose number format depends on the target
(FNUZ on gfx942, OCP on gfx950/gfx12 – isa_notes §5.7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import fp
from .valu_vop import Spec, vop

U32, U64, I32, I64 = np.uint32, np.uint64, np.int32, np.int64
F16, F32, F64 = np.float16, np.float32, np.float64


def _d(x: Any) -> np.ndarray:
    return np.asarray(x).astype(F64)


def _to_int(lo: int, hi: int, dt: type, rounding: Callable[[np.ndarray], np.ndarray] = np.trunc) \
        -> Callable[[np.ndarray], np.ndarray]:
    """Float to integer: rounded, saturated to [lo, hi], NaN -> 0."""
    def f(a: np.ndarray) -> np.ndarray:
        x = _d(a)
        r = np.clip(rounding(x), lo, hi)
        return np.where(np.isnan(x), 0, r).astype(dt)
    return f


_I32_RANGE = (-(1 << 31), (1 << 31) - 1)

vop("v_cvt_f32_f16", Spec("f32", ("f16",), lambda a: fp.quiet(a.astype(F32))))
vop("v_cvt_f16_f32", Spec("f16", ("f32",), fp.to_f16))
vop("v_cvt_f32_bf16", Spec("f32", ("bf16",), lambda a: fp.quiet(a)))
vop("v_cvt_f64_f32", Spec("f64", ("f32",), lambda a: fp.quiet(a.astype(F64))))
vop("v_cvt_f32_f64", Spec("f32", ("f64",), lambda a: fp.quiet(a.astype(F32))))
vop("v_cvt_f32_i32", Spec("f32", ("i32",), lambda a: a.astype(F32)))
vop("v_cvt_f32_u32", Spec("f32", ("u32",), lambda a: a.astype(F32)))
vop("v_cvt_f64_i32", Spec("f64", ("i32",), lambda a: a.astype(F64)))
vop("v_cvt_f64_u32", Spec("f64", ("u32",), lambda a: a.astype(F64)))
vop("v_cvt_f16_i16", Spec("f16", ("i16",), lambda a: fp.to_f16(_d(a))))
vop("v_cvt_f16_u16", Spec("f16", ("u16",), lambda a: fp.to_f16(_d(a))))
vop("v_cvt_i32_f32", Spec("i32", ("f32",), _to_int(*_I32_RANGE, I32)))
vop("v_cvt_u32_f32", Spec("u32", ("f32",), _to_int(0, (1 << 32) - 1, U32)))
vop("v_cvt_i32_f64", Spec("i32", ("f64",), _to_int(*_I32_RANGE, I32)))
vop("v_cvt_u32_f64", Spec("u32", ("f64",), _to_int(0, (1 << 32) - 1, U32)))
vop("v_cvt_i16_f16", Spec("i16", ("f16",), _to_int(-(1 << 15), (1 << 15) - 1, np.int16)))
vop("v_cvt_u16_f16", Spec("u16", ("f16",), _to_int(0, (1 << 16) - 1, np.uint16)))
vop("v_cvt_rpi_i32_f32 v_cvt_nearest_i32_f32",
    Spec("i32", ("f32",), _to_int(*_I32_RANGE, I32, lambda x: np.floor(x + 0.5))))
vop("v_cvt_flr_i32_f32 v_cvt_floor_i32_f32", Spec("i32", ("f32",), _to_int(*_I32_RANGE, I32, np.floor)))
vop("v_cvt_i32_i16", Spec("i32", ("i16",), lambda a: a.astype(I32)))
vop("v_cvt_u32_u16", Spec("u32", ("u16",), lambda a: a.astype(U32)))
for _n in range(4):
    vop(f"v_cvt_f32_ubyte{_n}", Spec("f32", ("u32",), lambda a, n=_n: ((a >> (8 * n)) & 0xFF).astype(F32)))
vop("v_cvt_off_f32_i4", Spec("f32", ("u32",), lambda a: ((((a & 0xF) ^ 8).astype(I32) - 8) / 16).astype(F32)))


def _pack16(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (np.asarray(lo).astype(U32) & 0xFFFF) | ((np.asarray(hi).astype(U32) & 0xFFFF) << 16)


def _f16bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, F16).view(np.uint16)


vop("v_cvt_pkrtz_f16_f32 v_cvt_pk_rtz_f16_f32",
    Spec("b32", ("f32", "f32"), lambda a, b: _pack16(_f16bits(fp.f32_to_f16_rtz(a)), _f16bits(fp.f32_to_f16_rtz(b)))))


def _cvt_pk_f16_f32(ctx: Any, mods: dict[str, str]) -> Callable[..., np.ndarray]:
    if ctx.extra.get("fp16_ovfl"):      # MODE.FP16_OVFL: finite overflow saturates
        return lambda a, b: _pack16(_f16bits(fp.saturate_f16(fp.to_f16(a), a)),
                                    _f16bits(fp.saturate_f16(fp.to_f16(b), b)))
    return lambda a, b: _pack16(_f16bits(fp.to_f16(a)), _f16bits(fp.to_f16(b)))


vop("v_cvt_pk_f16_f32", Spec("b32", ("f32", "f32"), _cvt_pk_f16_f32, ctx_fn=True))
# bf16 packing rounds to nearest even regardless of MODE, NaN quieted (S0 -> bits 15:0)
vop("v_cvt_pk_bf16_f32", Spec("b32", ("f32", "f32"), lambda a, b: _pack16(fp.f32_to_bf16_bits(a),
                                                                           fp.f32_to_bf16_bits(b))))
vop("v_pack_b32_f16", Spec("b32", ("f16", "f16"), lambda a, b: _pack16(_f16bits(a), _f16bits(b))))
vop("v_cvt_pk_u16_u32", Spec("b32", ("u32", "u32"), lambda a, b: _pack16(np.minimum(a, 0xFFFF),
                                                                          np.minimum(b, 0xFFFF))))
vop("v_cvt_pk_i16_i32", Spec("b32", ("i32", "i32"), lambda a, b: _pack16(np.clip(a, -32768, 32767),
                                                                          np.clip(b, -32768, 32767))))

# ---------------------------------------------------------------------------
# fp8 / bf8


def _formats(ctx: Any) -> tuple[fp.F8Format, fp.F8Format]:
    return fp.f8_formats(ctx.fp8)


def _pk_f32_from_f8(which: int) -> Callable[..., Callable[[np.ndarray], np.ndarray]]:
    def make(ctx: Any, mods: dict[str, str]) -> Callable[[np.ndarray], np.ndarray]:
        fmt = _formats(ctx)[which]

        def f(h: np.ndarray) -> np.ndarray:
            # two bytes of the selected 16-bit word -> two exact f32 (low byte -> low register)
            h = h.astype(U32)
            lo = fmt.decode(h & 0xFF).view(U32).astype(U64)
            hi = fmt.decode(h >> 8).view(U32).astype(U64)
            return lo | (hi << U64(32))
        return f
    return make


def _f32_from_f8(which: int) -> Callable[..., Callable[[np.ndarray], np.ndarray]]:
    def make(ctx: Any, mods: dict[str, str]) -> Callable[[np.ndarray], np.ndarray]:
        fmt = _formats(ctx)[which]
        byte = int(mods.get("byte_sel", "0"), 0)
        if not 0 <= byte <= 3:
            raise ValueError(f"bad byte_sel {byte}")
        return lambda a: fmt.decode((a >> (8 * byte)) & 0xFF)
    return make


def _pk_f8_from_f32(which: int) -> Callable[..., Callable[..., np.ndarray]]:
    def make(ctx: Any, mods: dict[str, str]) -> Callable[..., np.ndarray]:
        fmt = _formats(ctx)[which]
        sat = bool(ctx.extra.get("fp16_ovfl", False))    # MODE.FP16_OVFL (kernel descriptor)

        def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            # S0 -> low byte, S1 -> high byte of the selected 16-bit word (the other word is kept)
            return fmt.encode(a, sat) | (fmt.encode(b, sat) << 8)
        return f
    return make


def _scalef32_pk_f32_from_f8(which: int) -> Callable[..., Callable[..., np.ndarray]]:
    def make(ctx: Any, mods: dict[str, str]) -> Callable[..., np.ndarray]:
        fmt = _formats(ctx)[which]

        def f(h: np.ndarray, scale: np.ndarray) -> np.ndarray:
            # only the biased exponent field E of the f32 scale counts: x * 2^(E-127); E = 255 -> NaN
            e = ((scale.astype(U32) >> 23) & 0xFF).astype(I64)
            h = h.astype(U32)
            out = []
            for byte in (h & 0xFF, h >> 8):
                v = np.ldexp(_d(fmt.decode(byte)), e - 127)
                v = np.where(e == 255, np.nan, v)
                out.append(fp.quiet(v.astype(F32)).view(U32).astype(U64))
            return out[0] | (out[1] << U64(32))
        return f
    return make


vop("v_cvt_pk_f32_fp8", Spec("b64", ("b16",), _pk_f32_from_f8(0), ctx_fn=True))
vop("v_cvt_pk_f32_bf8", Spec("b64", ("b16",), _pk_f32_from_f8(1), ctx_fn=True))
vop("v_cvt_f32_fp8", Spec("f32", ("b32",), _f32_from_f8(0), ctx_fn=True, allow=frozenset({"byte_sel"})))
vop("v_cvt_f32_bf8", Spec("f32", ("b32",), _f32_from_f8(1), ctx_fn=True, allow=frozenset({"byte_sel"})))
vop("v_cvt_pk_fp8_f32", Spec("b16", ("f32", "f32"), _pk_f8_from_f32(0), ctx_fn=True, preserve16=True))
vop("v_cvt_pk_bf8_f32", Spec("b16", ("f32", "f32"), _pk_f8_from_f32(1), ctx_fn=True, preserve16=True))
vop("v_cvt_scalef32_pk_f32_fp8", Spec("b64", ("b16", "b32"), _scalef32_pk_f32_from_f8(0), ctx_fn=True))
vop("v_cvt_scalef32_pk_f32_bf8", Spec("b64", ("b16", "b32"), _scalef32_pk_f32_from_f8(1), ctx_fn=True))
