"""Matrix instructions: MFMA (gfx942, gfx950; wave64) and WMMA (gfx11, gfx12; wave32).

Every form computes D = A·B + C per block from per-lane register fragments. The
lane/element placement of A, B, C/D follows shared/reference/matrix_layouts.md
(quick-reference table, forward form "A[i][k] -> lane, element"); each form is
turned once into gather tables, so a handler is: read registers, decode the
elements, gather A and B, multiply, add C, scatter D.

Modelling choices (where hardware may differ):

* Arithmetic. Products of f16/bf16/fp8 values are exact in float64. Each output
  element is the exact sum of its K products plus C, rounded ONCE to the
  destination type (RNE, denormals kept). Every product is a multiple of the
  product of the operands' quanta, so the sum is formed exactly: by the float64
  matmul when all partial sums fit 52 bits of that quantum, else by splitting the
  products into two float64 limbs (always enough for f16 and fp8), else (bf16
  with a huge exponent spread, inf/NaN) by a TwoSum-compensated sum rounded to
  odd (fp.sum_rto; off by one unit only after extreme cancellation). Real
  hardware does not do this: CDNA3 aligns and truncates groups of 8 (fp8: 16)
  products and rounds per group (matrix_layouts §7); RDNA is undocumented (AMD's
  own model chains DOT2/DOT4 steps with f32 roundings, isa_notes §5.14). So D
  can differ from hardware in the last f32 bits, and small addends that
  hardware truncates away are kept here. As the sum is exact, the documented K
  numbering never matters (any consistent K relabeling gives the same D).
* Inputs: f16/bf16/fp8 subnormals are kept; fp8 is FNUZ or OCP per target
  (ctx.fp8). NaN results are the canonical positive quiet NaN; payloads and the
  sign of NaNs are not modelled.
* 16-bit results (v_wmma_f16_16x16x16_f16, v_wmma_bf16_16x16x16_bf16) round the
  exact value once to f16/bf16. On gfx11 element r of C/D sits in one half of
  VGPR base+r chosen by op_sel[2] (the other half is kept) with the f32 row
  mapping; on gfx12 the 8 elements are packed two per VGPR (element r in VGPR
  base + r//2, half r%2) with the gfx12 f32 row mapping. Both 16-bit layouts are
  inferred from the packing convention of matrix_layouts §1, not verified there.
* gfx950 32x32x16 f16/bf16 uses the 32x32x8 pattern with 8 K per lane (lane
  i + 32·⌊k/8⌋, element k mod 8; D as 32x32x8) – inferred from the 16x16x32
  pattern; K numbering is invisible to this emulator's exact arithmetic.
* gfx11 WMMA reads A/B from lanes 0–15; lanes 16–31 must hold identical copies
  (hardware behaviour with unequal halves is undocumented), so a mismatch raises.
* MFMA/WMMA need every lane: EXEC not all ones raises at execution.
* CBSZ/ABID/BLGP: implemented for the 16-block 4x4x4 MFMAs (documented formulas,
  §3.5, used by decode attention kernels); nonzero values on single-block MFMAs
  (not supported there per AMD's calculator) raise at decode. WMMA neg_lo/neg_hi
  raise at decode (not described by the layout notes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ...errors import EmulatorError
from .. import fp
from ..listing import Inst
from ..state import Operand, Wave, const_bits, parse_operand
from .core import DecodeContext, Handler, lane_constant, register
from .valu_common import fail, parse_mods

F32_QNAN = 0x7FC00000
F16_QNAN = 0x7E00
BF16_QNAN = 0x7FC0

# significand bits (with the implicit one) of each input type: sets the quantum of a value
_PREC = {"f16": 11, "bf16": 8, "fp8": 4, "bf8": 3}
_ELEM_BITS = {"f16": 16, "bf16": 16, "fp8": 8, "bf8": 8}


@dataclass(frozen=True)
class Form:
    """One matrix instruction as modelled: shape, types, register counts and lane layout."""

    name: str
    blocks: int
    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    d_type: str                # "f32", "f16" or "bf16"
    a_regs: int                # VGPRs per lane of A (and of B)
    d_regs: int                # VGPRs per lane of C/D
    lanes: int                 # wave size
    a_lane: np.ndarray         # [blocks, m, k] lane holding A[b][i][k]
    a_elem: np.ndarray         # [blocks, m, k] element index inside that lane's fragment
    b_lane: np.ndarray         # [blocks, k, n]
    b_elem: np.ndarray
    d_blk: np.ndarray          # [elements per lane, lanes]: which D[b][i][j] each C/D slot holds
    d_row: np.ndarray
    d_col: np.ndarray
    replicated: bool = False   # gfx11: lanes 16-31 repeat lanes 0-15 of A and B
    d_packed: bool = False     # 16-bit C/D packed two per VGPR (gfx12); else one per VGPR (gfx11 op_sel)


def _grid(*shape: int) -> tuple[np.ndarray, ...]:
    return tuple(np.indices(shape))


def _invert_d(lanes: int, per_lane: int, blk: np.ndarray, row: np.ndarray, col: np.ndarray,
              reg: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Turn the forward map D[b][i][j] -> (element, lane) into per-slot (b, i, j) tables."""
    out = np.full((3, per_lane, lanes), -1, np.intp)
    out[0][reg, lane], out[1][reg, lane], out[2][reg, lane] = blk, row, col
    # every C/D slot must hold exactly one element: guards the formulas below
    assert (out >= 0).all() and blk.size == per_lane * lanes, "matrix D layout is not a bijection"
    return out[0], out[1], out[2]


def _mfma(name: str, mn: int, k: int, a_type: str, b_type: str) -> Form:
    """Single-block MFMA (16x16xK or 32x32xK, wave64): lane groups of `mn` lanes split K."""
    kpl = k * mn // 64                          # K values per lane: K split over 64/mn lane groups
    _, i, kk = _grid(1, mn, k)
    a_lane, a_elem = i + mn * (kk // kpl), kk % kpl
    b, i, j = _grid(1, mn, mn)
    if mn == 16:
        d_lane, d_reg = j + 16 * (i // 4), i % 4
    else:                                       # 32x32: rows interleaved between lane halves in 4s (§3.2)
        d_lane, d_reg = j + 32 * ((i // 4) % 2), 4 * (i // 8) + i % 4
    per_lane = mn * mn // 64
    d = _invert_d(64, per_lane, b, i, j, d_reg, d_lane)
    return Form(name, 1, mn, mn, k, a_type, b_type, "f32", kpl * _ELEM_BITS[a_type] // 32, per_lane, 64,
                a_lane, a_elem, a_lane.transpose(0, 2, 1), a_elem.transpose(0, 2, 1), *d)


def _mfma_4x4x4(name: str, a_type: str) -> Form:
    """16 independent 4x4x4 blocks: block b in lanes 4b..4b+3 (§3.4)."""
    b, i, kk = _grid(16, 4, 4)
    a_lane, a_elem = 4 * b + i, kk
    b, i, j = _grid(16, 4, 4)
    d = _invert_d(64, 4, b, i, j, i, 4 * b + j)
    return Form(name, 16, 4, 4, 4, a_type, a_type, "f32", 2, 4, 64,
                a_lane, a_elem, a_lane.transpose(0, 2, 1), a_elem.transpose(0, 2, 1), *d)


def _wmma11(name: str, a_type: str, d_type: str) -> Form:
    """RDNA3: lane i holds all 16 K of row i (copied in lane i+16); D rows interleaved by lane half (§5.1)."""
    _, i, kk = _grid(1, 16, 16)
    b, r, j = _grid(1, 16, 16)
    d = _invert_d(32, 8, b, r, j, r // 2, j + 16 * (r % 2))
    return Form(name, 1, 16, 16, 16, a_type, a_type, d_type, 8, 8, 32,
                i, kk, i.transpose(0, 2, 1), kk.transpose(0, 2, 1), *d, replicated=True)


def _wmma12(name: str, a_type: str, b_type: str, d_type: str) -> Form:
    """RDNA4: no replication; lane half h holds rows 8h..8h+7 of D (§6)."""
    _, i, kk = _grid(1, 16, 16)
    if _ELEM_BITS[a_type] == 16:                # K interleaved in groups of 4 between lane halves
        a_lane, a_elem = i + 16 * ((kk // 4) % 2), 4 * (kk // 8) + kk % 4
    else:                                       # 8-bit: 8 contiguous K per lane
        a_lane, a_elem = i + 16 * (kk // 8), kk % 8
    b, r, j = _grid(1, 16, 16)
    d = _invert_d(32, 8, b, r, j, r % 8, j + 16 * (r // 8))
    return Form(name, 1, 16, 16, 16, a_type, b_type, d_type, 8 * _ELEM_BITS[a_type] // 32,
                8 if d_type == "f32" else 4, 32, a_lane, a_elem, a_lane.transpose(0, 2, 1),
                a_elem.transpose(0, 2, 1), *d, d_packed=d_type != "f32")


# ---------------------------------------------------------------------------
# forms by mnemonic and target

_F8 = ("fp8", "bf8")
_GFX9 = frozenset({"gfx942", "gfx950"})
_GFX950 = frozenset({"gfx950"})


@dataclass(frozen=True)
class Entry:
    archs: frozenset[str] | int          # arch names (MFMA) or the gfx generation (WMMA)
    build: Callable[[], Form]


_ENTRIES: dict[str, list[Entry]] = {}


def _add(names: tuple[str, ...], archs: frozenset[str] | int, build: Callable[[], Form]) -> None:
    for nm in names:
        _ENTRIES.setdefault(nm, []).append(Entry(archs, cache(build)))


def _define() -> None:
    for t in ("f16", "bf16"):
        old = "bf16_1k" if t == "bf16" else "f16"        # pre-rename LLVM spellings (e.g. 16x16x16bf16_1k)
        _add((f"v_mfma_f32_16x16x16_{t}", f"v_mfma_f32_16x16x16{old}"), _GFX9,
             lambda t=t: _mfma(f"16x16x16_{t}", 16, 16, t, t))
        _add((f"v_mfma_f32_32x32x8_{t}", f"v_mfma_f32_32x32x8{old}"), _GFX9,
             lambda t=t: _mfma(f"32x32x8_{t}", 32, 8, t, t))
        _add((f"v_mfma_f32_4x4x4_16b_{t}", f"v_mfma_f32_4x4x4{old}"), _GFX9,
             lambda t=t: _mfma_4x4x4(f"4x4x4_16b_{t}", t))
        _add((f"v_mfma_f32_16x16x32_{t}",), _GFX950, lambda t=t: _mfma(f"16x16x32_{t}", 16, 32, t, t))
        _add((f"v_mfma_f32_32x32x16_{t}",), _GFX950, lambda t=t: _mfma(f"32x32x16_{t}", 32, 16, t, t))
        _add((f"v_wmma_f32_16x16x16_{t}",), 11, lambda t=t: _wmma11(f"wmma11_f32_{t}", t, "f32"))
        _add((f"v_wmma_f32_16x16x16_{t}",), 12, lambda t=t: _wmma12(f"wmma12_f32_{t}", t, t, "f32"))
        _add((f"v_wmma_{t}_16x16x16_{t}",), 11, lambda t=t: _wmma11(f"wmma11_{t}_{t}", t, t))
        _add((f"v_wmma_{t}_16x16x16_{t}",), 12, lambda t=t: _wmma12(f"wmma12_{t}_{t}", t, t, t))
    for ta in _F8:
        for tb in _F8:
            _add((f"v_mfma_f32_16x16x32_{ta}_{tb}",), _GFX9, lambda ta=ta, tb=tb: _mfma(f"16x16x32_{ta}_{tb}", 16, 32,
                                                                                      ta, tb))
            _add((f"v_mfma_f32_32x32x16_{ta}_{tb}",), _GFX9, lambda ta=ta, tb=tb: _mfma(f"32x32x16_{ta}_{tb}", 32,
                                                                                      16, ta, tb))
            _add((f"v_wmma_f32_16x16x16_{ta}_{tb}",), 12, lambda ta=ta, tb=tb: _wmma12(f"wmma12_{ta}_{tb}", ta, tb,
                                                                                     "f32"))


_define()


def form_for(mnemonic: str, ctx: DecodeContext) -> Form:
    """The Form of `mnemonic` on ctx's target (raises if the target lacks it)."""
    for e in _ENTRIES.get(mnemonic, []):
        ok = ctx.arch in e.archs if isinstance(e.archs, frozenset) else ctx.gfx == e.archs
        if ok:
            form = e.build()
            if ctx.wave_size != form.lanes:
                raise EmulatorError(f"{mnemonic} is modelled for wave{form.lanes} only, not wave{ctx.wave_size}")
            return form
    raise EmulatorError(f"{mnemonic} does not exist on {ctx.arch}")


# ---------------------------------------------------------------------------
# arithmetic

def _decoder(typ: str, ctx: DecodeContext) -> Callable[[np.ndarray], np.ndarray]:
    """Raw element codes (uint32) to exact float64 values."""
    if typ == "f16":
        return lambda raw: raw.astype(np.uint16).view(np.float16).astype(np.float64)
    if typ == "bf16":
        return lambda raw: fp.bf16_to_f32(raw).astype(np.float64)
    fmt = fp.f8_formats(ctx.fp8)[0 if typ == "fp8" else 1]
    table = fmt.table.astype(np.float64)
    return lambda raw: table[raw.astype(np.intp)]


def _elements(regs: np.ndarray, bits: int) -> np.ndarray:
    """[regs, lanes] uint32 -> [elements, lanes] codes; element e in reg e*bits//32, little-endian."""
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)[None, :, None]
    parts = (regs[:, None, :] >> shifts) & np.uint32((1 << bits) - 1)
    return parts.reshape(regs.shape[0] * per, regs.shape[1])


def _quantum(x: np.ndarray, prec: int) -> float:
    """A power of two that divides every value of x (from its exponent and precision); inf if all zero."""
    nz = x[x != 0]
    if nz.size == 0:
        return np.inf
    _, e = np.frexp(nz)
    return float(np.ldexp(1.0, int(e.min()) - prec))


def _quanta(x: np.ndarray, prec: int) -> np.ndarray:
    """`_quantum` of each x[w] (one per wave of a cohort's [waves, ...] values)."""
    _, e = np.frexp(x)
    e = np.where(x != 0, e, 1 << 20).reshape(x.shape[0], -1).min(1)
    zero = e == 1 << 20                     # an all-zero wave (no ldexp of the sentinel: it overflows)
    return np.where(zero, np.inf, np.ldexp(1.0, np.where(zero, 0, e) - prec))


def _block_sums(a: np.ndarray, b: np.ndarray, c: np.ndarray, form: Form, pa: int, pb: int) -> np.ndarray:
    """Exact A·B + C per output slot ([slots, lanes] float64 c), rounded to odd in float64.

    The result has 53 bits and is round-to-odd, so one cast to f32/f16 (or a
    second round-to-odd step for bf16) is a single correct rounding. Every
    product is an exact multiple of q (the product of the operands' quanta), so a
    sum whose magnitudes stay below 2^52 q is exact in float64 in any order."""
    if np.isfinite(a).all() and np.isfinite(b).all():
        q = _quantum(a, pa) * _quantum(b, pb)
        bound = float((np.abs(a) @ np.abs(b)).max())
        if q == np.inf or bound <= np.ldexp(q, 52):
            # one limb: the float64 matmul is exact
            s = (a @ b)[form.d_blk, form.d_row, form.d_col]
            return fp.round_to_odd(*fp.two_sum(s, c))
        t = float(np.ldexp(1.0, int(np.frexp(bound)[1]) - 50))
        if form.k * t <= np.ldexp(q, 53):
            # two limbs: products split at t (multiples of t, remainders below t/2) sum exactly apart
            p = _products(a, b, form)
            hi = np.rint(p / t) * t
            return fp.sum_rto([c, hi.sum(-1), (p - hi).sum(-1)])
    # huge exponent spread (bf16) or inf/NaN: compensated sum of the K products and C
    p = _products(a, b, form)
    return fp.sum_rto([c, *(p[..., kk] for kk in range(form.k))])


def _products(a: np.ndarray, b: np.ndarray, form: Form) -> np.ndarray:
    """[slots, lanes, K] exact products feeding each C/D slot."""
    return a[form.d_blk, form.d_row, :] * b.transpose(0, 2, 1)[form.d_blk, form.d_col, :]


def _f64_to_f32_rto(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd (for a following correct rounding to bf16)."""
    r = x.astype(np.float32)
    inexact = np.isfinite(x) & (r.astype(np.float64) != x)
    if not inexact.any():
        return r
    toward0 = np.where(np.abs(r.astype(np.float64)) > np.abs(x), np.nextafter(r, np.float32(0)), r)
    odd = (toward0.view(np.uint32) | np.uint32(1)).view(np.float32)
    return np.where(inexact, odd, r)


def _to_bits(x: np.ndarray, typ: str, fp16_ovfl: bool = False) -> np.ndarray:
    """Round float64 (already round-to-odd) once to `typ`; raw bits as uint32, NaN canonical.
    `fp16_ovfl` (MODE.FP16_OVFL): an f16 overflow of a finite sum gives +-max."""
    nan = np.isnan(x)
    if typ == "f32":
        bits = x.astype(np.float32).view(np.uint32)
        qnan = F32_QNAN
    elif typ == "f16":
        r16 = fp.to_f16(x)
        bits = (fp.saturate_f16(r16, x) if fp16_ovfl else r16).view(np.uint16).astype(np.uint32)
        qnan = F16_QNAN
    else:
        bits = fp.f32_to_bf16_bits(_f64_to_f32_rto(x))
        qnan = BF16_QNAN
    return np.where(nan, np.uint32(qnan), bits).astype(np.uint32) if nan.any() else bits


def _from_bits(raw: np.ndarray, typ: str) -> np.ndarray:
    if typ == "f32":
        return raw.astype(np.uint32).view(np.float32).astype(np.float64)
    if typ == "f16":
        return raw.astype(np.uint16).view(np.float16).astype(np.float64)
    return fp.bf16_to_f32(raw).astype(np.float64)


# ---------------------------------------------------------------------------
# operands

_BLGP_SRC = (  # lane position l reads B from this lane (matrix_layouts §3.5)
    lambda lane: lane, lambda lane: lane % 32, lambda lane: 32 + lane % 32, lambda lane: (lane + 16) % 64,
    lambda lane: lane % 16, lambda lane: 16 + lane % 16, lambda lane: 32 + lane % 16, lambda lane: 48 + lane % 16)


def _reg_operand(inst: Inst, tok: str, count: int, ctx: DecodeContext, what: str) -> Operand:
    op = parse_operand(tok)
    if op.kind not in ("v", "a") or (op.kind == "a" and ctx.gfx != 9):
        raise fail(inst, f"{what} {tok} must be a VGPR tuple{' or AGPR tuple' if ctx.gfx == 9 else ''}")
    if op.neg or op.abs or op.half is not None:
        raise fail(inst, f"modifier syntax on matrix operand {tok}")
    if op.count != count:
        raise fail(inst, f"{what} {tok} has {op.count} registers, expected {count}")
    if op.index + count > 256:
        raise fail(inst, f"{what} {tok} runs past the register file")
    return op


def _read_regs(op: Operand) -> Callable[[Wave], np.ndarray]:
    lo, hi, file_ = op.index, op.index + op.count, op.kind
    if file_ == "a":
        return lambda w: w.a[lo:hi]  # type: ignore[index]
    return lambda w: w.v[lo:hi]


def _c_reader(inst: Inst, tok: str, form: Form, ctx: DecodeContext, hi: bool) -> Callable[[Wave], np.ndarray]:
    """C as float64 [elements per lane, lanes] in D slot order."""
    op = parse_operand(tok)
    per_lane = form.d_blk.shape[0]
    if op.kind == "const":
        if op.neg or op.abs:
            raise fail(inst, f"modifier syntax on constant C {tok}")
        if form.d_type != "f32" and op.value != 0:
            # which halves a nonzero 16-bit constant fills is not documented
            raise fail(inst, f"nonzero constant C {tok} for a 16-bit accumulator is not implemented")
        bits = const_bits(op, 32) if form.d_type == "f32" else 0
        return lane_constant(np.full((per_lane, 1), _from_bits(np.array(bits), "f32"), np.float64), ctx)
    regs = _read_regs(_reg_operand(inst, tok, form.d_regs, ctx, "C"))
    typ = form.d_type
    if typ == "f32":
        return lambda w: _from_bits(regs(w), "f32")
    if form.d_packed:
        return lambda w: _from_bits(_elements(regs(w), 16), typ)
    shift = np.uint32(16 if hi else 0)
    return lambda w: _from_bits((regs(w) >> shift) & np.uint32(0xFFFF), typ)


def _d_writer(inst: Inst, tok: str, form: Form, ctx: DecodeContext, hi: bool) -> Callable[[Wave, np.ndarray], None]:
    """Writes [elements per lane, lanes] raw result bits to the D registers."""
    op = _reg_operand(inst, tok, form.d_regs, ctx, "D")
    lo, hi_reg, file_ = op.index, op.index + op.count, op.kind
    if form.d_type == "f32":
        def w32(w: Wave, bits: np.ndarray) -> None:
            getattr(w, file_)[lo:hi_reg] = bits
        return w32
    if form.d_packed:
        def wpk(w: Wave, bits: np.ndarray) -> None:
            getattr(w, file_)[lo:hi_reg] = bits[0::2] | (bits[1::2] << np.uint32(16))
        return wpk
    keep = np.uint32(0x0000FFFF if hi else 0xFFFF0000)    # the other half is preserved
    shift = np.uint32(16 if hi else 0)

    def whalf(w: Wave, bits: np.ndarray) -> None:
        regs = getattr(w, file_)
        regs[lo:hi_reg] = (regs[lo:hi_reg] & keep) | (bits << shift)
    return whalf


def _exec_check(inst: Inst, lanes: int) -> Callable[[Wave], None]:
    full = (1 << lanes) - 1

    def check(w: Wave) -> None:
        e = w.exec_value()
        if e != full:
            raise EmulatorError(f"{inst.text!r}: matrix instructions need EXEC all ones, got EXEC=0x{e:x} "
                                "(the result would be undefined on hardware)")
    return check


# ---------------------------------------------------------------------------
# factory

def _int_mod(inst: Inst, other: dict[str, str], key: str) -> int:
    try:
        return int(other.get(key, "0"), 0)
    except ValueError:
        raise fail(inst, f"cannot parse {key}:{other[key]}") from None


def matrix_factory(inst: Inst, ctx: DecodeContext) -> Handler:
    form = form_for(inst.mnemonic, ctx)
    mfma = inst.mnemonic.startswith("v_mfma")
    if len(inst.operands) != 4:
        raise fail(inst, "expected D, A, B, C operands")
    mods = parse_mods(inst, inst.modifiers, allow=frozenset({"cbsz", "abid", "blgp"}) if mfma else frozenset())
    if mods.clamp or mods.omod != 1.0 or mods.dpp or mods.sdwa or mods.op_sel_hi:
        raise fail(inst, "modifier not supported on matrix instructions")
    hi = False
    if mods.op_sel is not None:
        sel = mods.op_sel
        # gfx11 16-bit-result WMMA: op_sel[2] picks the C/D half; nothing else is modelled
        if ctx.gfx != 11 or form.d_type == "f32" or len(sel) != 3 or sel[0] or sel[1]:
            raise fail(inst, f"op_sel:{list(sel)} is not implemented for this matrix instruction")
        hi = bool(sel[2])
    if any(mods.neg_lo or ()) or any(mods.neg_hi or ()):
        raise fail(inst, "WMMA neg_lo/neg_hi (operand negation) is not implemented")
    a_lane, b_lane = form.a_lane, form.b_lane
    if mfma:
        cbsz, abid, blgp = (_int_mod(inst, mods.other, k) for k in ("cbsz", "abid", "blgp"))
        if form.blocks == 1 and (cbsz or abid or blgp):
            raise fail(inst, "cbsz/abid/blgp must be 0 on single-block MFMAs (broadcast is not supported there)")
        if not 0 <= cbsz <= 4 or not 0 <= abid < (1 << cbsz) or not 0 <= blgp <= 7:
            raise fail(inst, f"illegal cbsz:{cbsz} abid:{abid} blgp:{blgp}")
        if cbsz:      # block b takes A from block (b - b mod 2^cbsz) + abid
            blk = np.arange(form.blocks)
            a_lane = a_lane[blk - blk % (1 << cbsz) + abid]
        if blgp:      # lane position l consumes the B registers of lane src(l)
            b_lane = _BLGP_SRC[blgp](b_lane)
    d_tok, a_tok, b_tok, c_tok = inst.operands
    read_a = _read_regs(_reg_operand(inst, a_tok, form.a_regs, ctx, "A"))
    read_b = _read_regs(_reg_operand(inst, b_tok, form.a_regs, ctx, "B"))
    read_c = _c_reader(inst, c_tok, form, ctx, hi)
    write_d = _d_writer(inst, d_tok, form, ctx, hi)
    dec_a, dec_b = _decoder(form.a_type, ctx), _decoder(form.b_type, ctx)
    bits_a, bits_b = _ELEM_BITS[form.a_type], _ELEM_BITS[form.b_type]
    pa, pb = _PREC[form.a_type], _PREC[form.b_type]
    a_elem, b_elem = form.a_elem, form.b_elem
    check_exec = _exec_check(inst, form.lanes)
    half = form.lanes // 2
    sat = bool(ctx.extra.get("fp16_ovfl"))

    if ctx.cohort:
        return _cohort_handler(inst, ctx, form, read_a, read_b, read_c, write_d, a_lane, b_lane)

    def handler(w: Wave) -> None:
        check_exec(w)
        ra, rb = read_a(w), read_b(w)
        if form.replicated and not (np.array_equal(ra[:, :half], ra[:, half:])
                                    and np.array_equal(rb[:, :half], rb[:, half:])):
            raise EmulatorError(f"{inst.text!r}: gfx11 WMMA needs lanes 16-31 of A and B to repeat lanes 0-15 "
                                "(unequal halves are undefined on hardware)")
        a = dec_a(_elements(ra, bits_a))[a_elem, a_lane]
        b = dec_b(_elements(rb, bits_b))[b_elem, b_lane]
        out = _block_sums(a, b, read_c(w), form, pa, pb)
        write_d(w, _to_bits(out, form.d_type, sat))

    return handler


def _cohort_handler(inst: Inst, ctx: DecodeContext, form: Form, read_a: Callable, read_b: Callable,
                    read_c: Callable, write_d: Callable, a_lane: np.ndarray, b_lane: np.ndarray) -> Handler:
    """The matrix op for a lockstep cohort (`Cohort` of any number of waves): the waves' blocks as
    one batched float64 matmul, kept for each wave whose own sums it forms exactly (the one-wave
    handler's first test, per wave: a test over the whole batch mixes one wave's smallest quantum
    with another's largest sum and failed on most cohorts); the other waves' sums by `_block_sums`
    as alone. Every path is the exact sum rounded once, so the result is the one-wave handler's."""
    single = matrix_factory(inst, dataclasses.replace(ctx, cohort=False))
    lanes = form.lanes
    dec_a, dec_b = _decoder(form.a_type, ctx), _decoder(form.b_type, ctx)
    bits_a, bits_b = _ELEM_BITS[form.a_type], _ELEM_BITS[form.b_type]
    pa, pb = _PREC[form.a_type], _PREC[form.b_type]
    a_elem, b_elem, half = form.a_elem, form.b_elem, lanes // 2
    d_blk, d_row, d_col = form.d_blk, form.d_row, form.d_col
    slots = d_blk.shape[0]

    def gather(regs: np.ndarray, bits: int, dec: Callable, elem: np.ndarray, lane: np.ndarray,
               waves: int) -> np.ndarray:
        codes = _elements(regs, bits)                        # [elements, waves * lanes]
        vals = dec(codes).reshape(codes.shape[0], waves, lanes)
        picked = vals[elem, :, lane]                         # [blocks, rows, cols, waves]
        return picked.transpose(picked.ndim - 1, *range(picked.ndim - 1))    # [waves, blocks, rows, cols]

    def handler(w: Any) -> None:
        waves = w.n // lanes
        if waves == 1:
            single(w)
            return
        if w.mask is not w.full:
            w.each(single)                                   # raises with the member's EXEC
            return
        ra, rb = read_a(w), read_b(w)
        if form.replicated:
            ha, hb = ra.reshape(ra.shape[0], waves, lanes), rb.reshape(rb.shape[0], waves, lanes)
            if not (np.array_equal(ha[..., :half], ha[..., half:]) and np.array_equal(hb[..., :half], hb[..., half:])):
                w.each(single)                               # raises for the wave with unequal halves
                return
        a = gather(ra, bits_a, dec_a, a_elem, a_lane, waves)
        b = gather(rb, bits_b, dec_b, b_elem, b_lane, waves)
        c = read_c(w)
        finite = np.isfinite(a).reshape(waves, -1).all(1) & np.isfinite(b).reshape(waves, -1).all(1)
        q = _quanta(a, pa) * _quanta(b, pb)
        bound = (np.abs(a) @ np.abs(b)).reshape(waves, -1).max(1)
        exact = finite & ((q == np.inf) | (bound <= np.ldexp(q, 52)))
        s = (a @ b)[:, d_blk, d_row, d_col]                  # [waves, slots, lanes]: exact where `exact`
        s = s.transpose(1, 0, 2).reshape(slots, waves * lanes)
        out = fp.round_to_odd(*fp.two_sum(s, c))
        for k in np.flatnonzero(~exact):                     # rare: wide exponent spread, inf/NaN
            lanes_k = slice(k * lanes, (k + 1) * lanes)
            out[:, lanes_k] = _block_sums(a[k], b[k], c[:, lanes_k], form, pa, pb)
        write_d(w, _to_bits(out, form.d_type, bool(ctx.extra.get("fp16_ovfl"))))

    return handler


register(*_ENTRIES, cls="matrix")(matrix_factory)
