"""MFMA / WMMA semantics of the CPU emulator against numpy.

Operands are placed with the *inverse* layout formulas of
shared/reference/matrix_layouts.md ("lane l, element e holds A[..][..]"; "accumulator
register r of lane l is D[..][..]"), written out here independently of the emulator's
forward tables. Values are encoded with ml_dtypes (not the emulator's fp helpers).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from hipskinny.emulator.listing import Inst, parse_instruction
from hipskinny.emulator.ops import DecodeContext, Handler, load_all, lookup
from hipskinny.emulator.state import Wave
from hipskinny.errors import EmulatorError

load_all()

ARCH = {"gfx942": (9, 64, "fnuz"), "gfx950": (9, 64, "ocp"), "gfx1100": (11, 32, None),
        "gfx1151": (11, 32, None), "gfx1201": (12, 32, "ocp")}

Inv = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Case:
    mnemonic: str
    blocks: int
    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    d_type: str
    a_inv: Inv              # (element e, lane l) -> (block, row i, k) of A; B mirrors it with column j
    d_inv: Inv              # (acc element r, lane l) -> (block, i, j) of D
    lanes: int
    a_elems: int            # elements per lane of A / B
    d_elems: int            # accumulator elements per lane


def _z(x: np.ndarray) -> np.ndarray:
    return np.zeros_like(x)


# inverse layouts, straight from the notes
def a_16(kpl: int) -> Inv:          # 16x16xK MFMA: A[l mod 16][kpl*floor(l/16) + e]
    return lambda e, lane: (_z(e), lane % 16, kpl * (lane // 16) + e)


def a_32(kpl: int) -> Inv:          # 32x32xK MFMA: A[l mod 32][kpl*floor(l/32) + e]
    return lambda e, lane: (_z(e), lane % 32, kpl * (lane // 32) + e)


def d_16(r: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(r), 4 * (lane // 16) + r, lane % 16


def d_32(r: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(r), 8 * (r // 4) + 4 * (lane // 32) + r % 4, lane % 32


def a_4x4(e: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return lane // 4, lane % 4, e


def d_4x4(r: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return lane // 4, r, lane % 4


def a_w11(e: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(e), lane % 16, e                                   # lanes 16-31 repeat 0-15


def d_w11(r: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(r), 2 * r + lane // 16, lane % 16


def a_w12_16(e: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(e), lane % 16, 8 * (e // 4) + 4 * (lane // 16) + e % 4


def a_w12_8(e: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(e), lane % 16, 8 * (lane // 16) + e


def d_w12(r: np.ndarray, lane: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _z(r), 8 * (lane // 16) + r, lane % 16


F8 = ("fp8", "bf8")


def cases() -> list[tuple[str, Case]]:
    out: list[tuple[str, Case]] = []
    for arch in ("gfx942", "gfx950"):
        for t in ("f16", "bf16"):
            out += [(arch, Case(f"v_mfma_f32_16x16x16_{t}", 1, 16, 16, 16, t, t, "f32", a_16(4), d_16, 64, 4, 4)),
                    (arch, Case(f"v_mfma_f32_32x32x8_{t}", 1, 32, 32, 8, t, t, "f32", a_32(4), d_32, 64, 4, 16)),
                    (arch, Case(f"v_mfma_f32_4x4x4_16b_{t}", 16, 4, 4, 4, t, t, "f32", a_4x4, d_4x4, 64, 4, 4))]
        for ta in F8:
            for tb in F8:
                out += [(arch, Case(f"v_mfma_f32_16x16x32_{ta}_{tb}", 1, 16, 16, 32, ta, tb, "f32", a_16(8), d_16,
                                    64, 8, 4)),
                        (arch, Case(f"v_mfma_f32_32x32x16_{ta}_{tb}", 1, 32, 32, 16, ta, tb, "f32", a_32(8), d_32,
                                    64, 8, 16))]
    for t in ("f16", "bf16"):
        out += [("gfx950", Case(f"v_mfma_f32_16x16x32_{t}", 1, 16, 16, 32, t, t, "f32", a_16(8), d_16, 64, 8, 4)),
                ("gfx950", Case(f"v_mfma_f32_32x32x16_{t}", 1, 32, 32, 16, t, t, "f32", a_32(8), d_32, 64, 8, 16))]
        for arch in ("gfx1100", "gfx1151"):
            out += [(arch, Case(f"v_wmma_f32_16x16x16_{t}", 1, 16, 16, 16, t, t, "f32", a_w11, d_w11, 32, 16, 8)),
                    (arch, Case(f"v_wmma_{t}_16x16x16_{t}", 1, 16, 16, 16, t, t, t, a_w11, d_w11, 32, 16, 8))]
        out += [("gfx1201", Case(f"v_wmma_f32_16x16x16_{t}", 1, 16, 16, 16, t, t, "f32", a_w12_16, d_w12, 32, 8, 8)),
                ("gfx1201", Case(f"v_wmma_{t}_16x16x16_{t}", 1, 16, 16, 16, t, t, t, a_w12_16, d_w12, 32, 8, 8))]
    for ta in F8:
        for tb in F8:
            out.append(("gfx1201", Case(f"v_wmma_f32_16x16x16_{ta}_{tb}", 1, 16, 16, 16, ta, tb, "f32", a_w12_8,
                                        d_w12, 32, 8, 8)))
    return out


CASES = cases()
IDS = [f"{arch}-{c.mnemonic}" for arch, c in CASES]


# ---------------------------------------------------------------------------
# encoding (ml_dtypes) and register placement

def np_type(typ: str, arch: str) -> type:
    fnuz = ARCH[arch][2] == "fnuz"
    return {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32,
            "fp8": ml_dtypes.float8_e4m3fnuz if fnuz else ml_dtypes.float8_e4m3fn,
            "bf8": ml_dtypes.float8_e5m2fnuz if fnuz else ml_dtypes.float8_e5m2}[typ]


def bits_of(typ: str) -> int:
    return {"f16": 16, "bf16": 16, "fp8": 8, "bf8": 8, "f32": 32}[typ]


def encode(x: np.ndarray, typ: str, arch: str) -> np.ndarray:
    """Values (exactly representable) -> codes as uint32."""
    t = np_type(typ, arch)
    y = np.asarray(x).astype(t)
    assert np.array_equal(y.astype(np.float64), np.asarray(x, np.float64), equal_nan=True), "value not exact"
    return y.view({8: np.uint8, 16: np.uint16, 32: np.uint32}[bits_of(typ)]).astype(np.uint32)


def pack(elems: np.ndarray, bits: int) -> np.ndarray:
    """[elements, lanes] codes -> [regs, lanes] uint32, element e in reg e*bits//32 (little-endian)."""
    per = 32 // bits
    regs = np.zeros((elems.shape[0] // per, elems.shape[1]), np.uint32)
    for e in range(elems.shape[0]):
        regs[e // per] |= elems[e].astype(np.uint32) << np.uint32(bits * (e % per))
    return regs


def unpack(regs: np.ndarray, bits: int) -> np.ndarray:
    per = 32 // bits
    return np.stack([(regs[e // per] >> np.uint32(bits * (e % per))) & np.uint32((1 << bits) - 1)
                     for e in range(regs.shape[0] * per)])


def place_a(c: Case, mat: np.ndarray, typ: str, arch: str) -> np.ndarray:
    """A [blocks, m, k] -> registers [regs, lanes]."""
    e, lane = np.indices((c.a_elems, c.lanes))
    b, i, k = c.a_inv(e, lane)
    return pack(encode(mat[b, i, k], typ, arch), bits_of(typ))


def place_b(c: Case, mat: np.ndarray, typ: str, arch: str) -> np.ndarray:
    """B [blocks, k, n] -> registers (B[k][j] sits where A[j][k] would)."""
    return place_a(c, mat.transpose(0, 2, 1), typ, arch)


def acc_slots(c: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r, lane = np.indices((c.d_elems, c.lanes))
    return c.d_inv(r, lane)


def place_c(c: Case, mat: np.ndarray, arch: str, hi: bool = False, base: np.ndarray | None = None) -> np.ndarray:
    codes = encode(mat[acc_slots(c)], c.d_type, arch)
    if c.d_type == "f32":
        return codes
    if ARCH[arch][0] == 12:                          # gfx12: two 16-bit elements per VGPR
        return pack(codes, 16)
    old = np.zeros_like(codes) if base is None else base
    return (old & np.uint32(0xFFFF)) | (codes << 16) if hi else (old & np.uint32(0xFFFF0000)) | codes


def read_d(c: Case, regs: np.ndarray, arch: str, hi: bool = False) -> np.ndarray:
    if c.d_type == "f32":
        codes = regs
    elif ARCH[arch][0] == 12:
        codes = unpack(regs, 16)
    else:
        codes = (regs >> np.uint32(16 if hi else 0)) & np.uint32(0xFFFF)
    vals = codes.astype({16: np.uint16, 32: np.uint32}[bits_of(c.d_type)]).view(np_type(c.d_type, arch))
    out = np.full((c.blocks, c.m, c.n), np.nan)
    out[acc_slots(c)] = vals.astype(np.float64)
    assert not np.isnan(out).any(), "some D element has no accumulator slot"
    return out


# ---------------------------------------------------------------------------
# running

def ctx_of(arch: str) -> DecodeContext:
    gfx, n, f8 = ARCH[arch]
    return DecodeContext(arch, gfx, n, f8, {})


def decode(text: str, arch: str) -> Handler:
    mnemonic, ops, mods = parse_instruction(text)
    found = lookup(mnemonic)
    assert found is not None and found[1] == "matrix", f"{mnemonic} is not registered as a matrix op"
    return found[0](Inst(0x1000, 8, text, mnemonic, ops, mods, b""), ctx_of(arch))


def new_wave(arch: str) -> Wave:
    gfx, n, _ = ARCH[arch]
    w = Wave(n, gfx == 9, None, 0)
    w.set_exec((1 << n) - 1)
    return w


def d_regs(c: Case, arch: str) -> int:
    if c.d_type == "f32" or ARCH[arch][0] == 11:
        return c.d_elems
    return c.d_elems // 2


def a_regs(c: Case) -> int:
    return c.a_elems * bits_of(c.a_type) // 32


def rng_text(file_: str, base: int, count: int) -> str:
    return f"{file_}[{base}:{base + count - 1}]"


def inst_text(c: Case, arch: str, d: str = "v", ab: str = "v", cfile: str = "v", mods: str = "") -> str:
    dr, ar = d_regs(c, arch), a_regs(c)
    cop = "0" if cfile == "0" else rng_text(cfile, 0, dr)
    return f"{c.mnemonic} {rng_text(d, 0, dr)}, {rng_text(ab, 32, ar)}, {rng_text(ab, 64, ar)}, {cop} {mods}".strip()


def run_case(c: Case, arch: str, a: np.ndarray, b: np.ndarray, cm: np.ndarray, *, d: str = "v", ab: str = "v",
             cfile: str = "v") -> np.ndarray:
    w = new_wave(arch)
    files = {"v": w.v, "a": w.a}
    ar = a_regs(c)
    files[ab][32:32 + ar] = place_a(c, a, c.a_type, arch)
    files[ab][64:64 + ar] = place_b(c, b, c.b_type, arch)
    if cfile != "0":
        files[cfile][0:d_regs(c, arch)] = place_c(c, cm, arch)
    decode(inst_text(c, arch, d, ab, cfile), arch)(w)
    return read_d(c, files[d][0:d_regs(c, arch)], arch)


def reference(a: np.ndarray, b: np.ndarray, cm: np.ndarray, typ: str, arch: str) -> np.ndarray:
    """float64 A @ B + C rounded to the accumulator type (exact here for the integer tests)."""
    return (a.astype(np.float64) @ b.astype(np.float64) + cm).astype(np_type(typ, arch)).astype(np.float64)


def small_ints(rng: np.random.Generator, shape: tuple[int, ...], lim: int) -> np.ndarray:
    return rng.integers(-lim, lim + 1, shape).astype(np.float64)


# ---------------------------------------------------------------------------
# every instruction on every arch

@pytest.mark.parametrize(("arch", "c"), CASES, ids=IDS)
def test_small_integers_exact(arch: str, c: Case) -> None:
    rng = np.random.default_rng(zlib.crc32(c.mnemonic.encode()))
    a = small_ints(rng, (c.blocks, c.m, c.k), 4)
    b = small_ints(rng, (c.blocks, c.k, c.n), 4)
    # sums stay below 2^8 for bf16 results, 2^11 for f16, so the exact value is representable
    cm = small_ints(rng, (c.blocks, c.m, c.n), 32 if c.d_type == "bf16" else 64)
    if c.d_type == "bf16":
        a, b = np.clip(a, -2, 2), np.clip(b, -2, 2)
    ref = a @ b + cm
    assert np.array_equal(reference(a, b, cm, c.d_type, arch), ref)
    got = run_case(c, arch, a, b, cm)
    np.testing.assert_array_equal(got, ref)


def random_values(rng: np.random.Generator, shape: tuple[int, ...], typ: str, arch: str) -> np.ndarray:
    scale = {"f16": 1.0, "bf16": 1.0, "fp8": 4.0, "bf8": 4.0}[typ]
    return (rng.standard_normal(shape) * scale).astype(np_type(typ, arch)).astype(np.float64)


@pytest.mark.parametrize(("arch", "c"), CASES, ids=IDS)
def test_random_normal_within_fp32_accumulation_bound(arch: str, c: Case) -> None:
    rng = np.random.default_rng(1 + zlib.crc32(c.mnemonic.encode()))
    a = random_values(rng, (c.blocks, c.m, c.k), c.a_type, arch)
    b = random_values(rng, (c.blocks, c.k, c.n), c.b_type, arch)
    cm = rng.standard_normal((c.blocks, c.m, c.n)).astype(np_type(c.d_type, arch)).astype(np.float64)
    got = run_case(c, arch, a, b, cm)
    ref = reference(a, b, cm, c.d_type, arch)
    absab = np.abs(a) @ np.abs(b)
    ulp = np.spacing(np.abs(ref).astype(np_type(c.d_type, arch))).astype(np.float64)
    tol = c.k * 2.0 ** -24 * absab + ulp
    assert (np.abs(got - ref) <= tol).all(), np.abs(got - ref).max()
    # the emulator rounds the exact value once, so it matches the float64 reference to the last bit here
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(("arch", "c"), [x for x in CASES if x[0] in ("gfx942", "gfx1100", "gfx1201")],
                         ids=[i for i, x in zip(IDS, CASES, strict=True) if x[0] in ("gfx942", "gfx1100", "gfx1201")])
def test_one_hot_slot_map(arch: str, c: Case) -> None:
    """A = one-hot at (i0, k0), B = one-hot at (k0, j0): exactly D[i0][j0] gets 1 (+ C)."""
    rng = np.random.default_rng(7)
    for _ in range(4):
        bi, i0, j0, k0 = (int(rng.integers(x)) for x in (c.blocks, c.m, c.n, c.k))
        a = np.zeros((c.blocks, c.m, c.k))
        b = np.zeros((c.blocks, c.k, c.n))
        a[bi, i0, k0] = 1.0
        b[bi, k0, j0] = 1.0
        cm = np.arange(c.blocks * c.m * c.n, dtype=np.float64).reshape(c.blocks, c.m, c.n) % 50
        want = cm.copy()
        want[bi, i0, j0] += 1
        np.testing.assert_array_equal(run_case(c, arch, a, b, cm), want)


# ---------------------------------------------------------------------------
# layouts spelled out as concrete slots (guards against a formula shared by test and emulator)

def test_32x32x8_d_is_interleaved_in_groups_of_four_rows() -> None:
    w = new_wave("gfx942")
    # A[5][k] = 1 for all k (lane 5 and lane 37 hold row 5), B[k][3] = 1 (lanes 3 and 35)
    one = np.uint32(0x3C003C00)
    w.v[32:34, [5, 37]] = one
    w.v[64:66, [3, 35]] = one
    decode("v_mfma_f32_32x32x8_f16 v[0:15], v[32:33], v[64:65], 0", "gfx942")(w)
    d = w.v[0:16].view(np.float32)
    assert d[1, 35] == 8.0                       # D[5][3]: register 1 of lane 35, not register 5 of lane 3
    assert np.count_nonzero(d) == 1


def test_gfx11_and_gfx12_wmma_d_rows() -> None:
    one16 = np.uint32(0x3C003C00)
    # gfx11: A row 3 in lanes 3 and 19 (all 16 k), B column 5 in lanes 5 and 21
    w = new_wave("gfx1100")
    w.v[32:40, [3, 19]] = one16
    w.v[64:72, [5, 21]] = one16
    decode("v_wmma_f32_16x16x16_f16 v[0:7], v[32:39], v[64:71], 0", "gfx1100")(w)
    d = w.v[0:8].view(np.float32)
    assert d[1, 21] == 16.0 and np.count_nonzero(d) == 1      # D[3][5] = register 1 of lane 16 + 5
    # gfx12: row 9 in lane 9 (k 0-3, 8-11) and lane 25 (k 4-7, 12-15)
    w = new_wave("gfx1201")
    w.v[32:36, [9, 25]] = one16
    w.v[64:68, [5, 21]] = one16
    decode("v_wmma_f32_16x16x16_f16 v[0:7], v[32:35], v[64:67], 0", "gfx1201")(w)
    d = w.v[0:8].view(np.float32)
    assert d[1, 21] == 16.0 and np.count_nonzero(d) == 1      # D[9][5] = register 1 of lane 16 + 5


def test_4x4x4_batched_dot_lands_on_the_diagonal() -> None:
    """Each lane's own 4-vector dot product lands in register (lane mod 4) of that lane (§3.4)."""
    rng = np.random.default_rng(3)
    av = small_ints(rng, (64, 4), 3)
    bv = small_ints(rng, (64, 4), 3)
    w = new_wave("gfx942")
    w.v[32:34] = pack(encode(av.T, "f16", "gfx942"), 16)
    w.v[64:66] = pack(encode(bv.T, "f16", "gfx942"), 16)
    decode("v_mfma_f32_4x4x4_16b_f16 v[0:3], v[32:33], v[64:65], 0", "gfx942")(w)
    d = w.v[0:4].view(np.float32)
    lane = np.arange(64)
    np.testing.assert_array_equal(d[lane % 4, lane], (av * bv).sum(1))
    for r in range(4):   # the other registers pair b_l with the A vector of lane 4*floor(l/4) + r
        np.testing.assert_array_equal(d[r], (av[4 * (lane // 4) + r] * bv).sum(1))


# ---------------------------------------------------------------------------
# operands: AGPRs, constants, aliasing, 16-bit halves

@pytest.mark.parametrize("where", [("a", "v", "a"), ("v", "a", "v"), ("a", "a", "a"), ("a", "v", "0")])
def test_agpr_operands_and_constant_c(where: tuple[str, str, str]) -> None:
    d, ab, cf = where
    c = next(x for arch, x in CASES if arch == "gfx942" and x.mnemonic == "v_mfma_f32_16x16x16_f16")
    rng = np.random.default_rng(11)
    a, b = small_ints(rng, (1, 16, 16), 4), small_ints(rng, (1, 16, 16), 4)
    cm = np.zeros((1, 16, 16)) if cf == "0" else small_ints(rng, (1, 16, 16), 50)
    np.testing.assert_array_equal(run_case(c, "gfx942", a, b, cm, d=d, ab=ab, cfile=cf), a @ b + cm)


def test_inline_float_constant_c_broadcasts() -> None:
    w = new_wave("gfx1201")
    decode("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], 1.0", "gfx1201")(w)
    assert (w.v[0:8].view(np.float32) == 1.0).all()


def test_d_overlapping_a_reads_inputs_first() -> None:
    w = new_wave("gfx942")
    w.v[0:2] = np.uint32(0x3C003C00)          # A = all ones, then overwritten by D
    w.v[2:4] = np.uint32(0x40004000)          # B = all twos
    decode("v_mfma_f32_16x16x16_f16 v[0:3], v[0:1], v[2:3], 0", "gfx942")(w)
    assert (w.v[0:4].view(np.float32) == 32.0).all()


@pytest.mark.parametrize("typ", ["f16", "bf16"])
@pytest.mark.parametrize("hi", [False, True])
def test_gfx11_16bit_result_op_sel_half(typ: str, hi: bool) -> None:
    c = next(x for arch, x in CASES if arch == "gfx1100" and x.mnemonic == f"v_wmma_{typ}_16x16x16_{typ}")
    rng = np.random.default_rng(5)
    a, b = small_ints(rng, (1, 16, 16), 2), small_ints(rng, (1, 16, 16), 2)
    cm = small_ints(rng, (1, 16, 16), 30)
    w = new_wave("gfx1100")
    w.v[32:40] = place_a(c, a, typ, "gfx1100")
    w.v[64:72] = place_b(c, b, typ, "gfx1100")
    other = rng.integers(0, 1 << 32, (8, 32), dtype=np.uint64).astype(np.uint32)
    w.v[0:8] = place_c(c, cm, "gfx1100", hi=hi, base=other)
    mods = " op_sel:[0,0,1]" if hi else ""
    decode(f"v_wmma_{typ}_16x16x16_{typ} v[0:7], v[32:39], v[64:71], v[0:7]{mods}", "gfx1100")(w)
    np.testing.assert_array_equal(read_d(c, w.v[0:8], "gfx1100", hi=hi), a @ b + cm)
    keep = np.uint32(0xFFFF if hi else 0xFFFF0000)
    np.testing.assert_array_equal(w.v[0:8] & keep, other & keep)     # the other half is untouched


# ---------------------------------------------------------------------------
# number formats and rounding

def test_fp8_is_fnuz_on_gfx942_and_ocp_on_gfx950() -> None:
    """Same bytes: each OCP value is twice the FNUZ value, so a product is 4x (§4.2)."""
    out = {}
    for arch in ("gfx942", "gfx950"):
        w = new_wave(arch)
        w.v[32:34] = np.uint32(0x38383838)    # every A byte 0x38: FNUZ 0.5, OCP E4M3 1.0
        w.v[64:66] = np.uint32(0x40404040)    # every B byte 0x40: FNUZ 1.0, OCP 2.0
        decode("v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[32:33], v[64:65], 0", arch)(w)
        out[arch] = w.v[0:4].view(np.float32).copy()
    assert (out["gfx942"] == 32 * 0.5).all()
    assert (out["gfx950"] == 32 * 2.0).all()


def test_fnuz_nan_code_propagates() -> None:
    w = new_wave("gfx942")
    w.v[32, 0] = np.uint32(0x80)              # FNUZ NaN in A[0][0]
    decode("v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[32:33], v[64:65], 0", "gfx942")(w)
    d = w.v[0:4]
    assert d[0, 0:16].tolist() == [0x7FC00000] * 16       # row 0 of D is NaN (canonical)
    assert (d[:, 16:] == 0).all() and (d[1:, :16] == 0).all()


def round_f32(x: Fraction) -> float:
    """Correctly rounded (RNE) f32 value of an exact rational."""
    f = np.float32(float(x))
    lo, hi = (f, np.nextafter(f, np.float32(np.inf))) if Fraction(float(f)) <= x else \
        (np.nextafter(f, np.float32(-np.inf)), f)
    dl, dh = x - Fraction(float(lo)), Fraction(float(hi)) - x
    if dl != dh:
        return float(lo if dl < dh else hi)
    return float(lo if int(lo.view(np.uint32)) % 2 == 0 else hi)


WIDE = [("gfx950", "v_mfma_f32_16x16x32_bf16", 30),      # exponent spread beyond two float64 limbs
        ("gfx942", "v_mfma_f32_16x16x16_f16", 14),       # f16 subnormals next to 2^15: two limbs
        ("gfx1201", "v_wmma_f32_16x16x16_bf8_bf8", 14),  # OCP E5M2 subnormals .. 2^15
        ("gfx942", "v_mfma_f32_32x32x8_bf16", 4)]        # narrow: the plain float64 matmul is exact


@pytest.mark.parametrize(("arch", "mnemonic", "spread"), WIDE)
def test_single_rounding_of_the_exact_sum(arch: str, mnemonic: str, spread: int) -> None:
    """D equals the exact rational A·B + C rounded once to f32, whatever the exponent spread."""
    c = next(x for ar, x in CASES if ar == arch and x.mnemonic == mnemonic)
    rng = np.random.default_rng(spread)

    def values(shape: tuple[int, ...], typ: str) -> np.ndarray:
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
        with np.errstate(over="ignore"):
            y = x.astype(np_type(typ, arch)).astype(np.float64)
        return np.where(np.isfinite(y), y, 1.0)

    a = values((c.blocks, c.m, c.k), c.a_type)
    b = values((c.blocks, c.k, c.n), c.b_type)
    cm = (rng.standard_normal((c.blocks, c.m, c.n)) * 2.0 ** 10).astype(np.float32).astype(np.float64)
    cm[0, 0, 0] = -float(Fraction(a[0, 0, 0]) * Fraction(b[0, 0, 0]))   # some cancellation
    got = run_case(c, arch, a, b, cm)
    for i in range(c.m):
        for j in range(c.n):
            exact = sum((Fraction(a[0, i, k]) * Fraction(b[0, k, j]) for k in range(c.k)), Fraction(cm[0, i, j]))
            assert got[0, i, j] == round_f32(exact), (i, j)


def test_bf16_result_rounds_once() -> None:
    """1 + 2^-8 + 2^-30 must round up to 1 + 2^-7 in bf16 (rounding to f32 first makes a tie -> 1.0)."""
    c = next(x for arch, x in CASES if arch == "gfx1201" and x.mnemonic == "v_wmma_bf16_16x16x16_bf16")
    a = np.zeros((1, 16, 16))
    b = np.zeros((1, 16, 16))
    a[0, 0, 0], b[0, 0, 0] = 2.0 ** -8, 1.0
    a[0, 0, 1], b[0, 1, 0] = 2.0 ** -15, 2.0 ** -15
    cm = np.zeros((1, 16, 16))
    cm[0, 0, 0] = 1.0
    got = run_case(c, "gfx1201", a, b, cm)
    assert got[0, 0, 0] == 1.0 + 2.0 ** -7
    assert math.isclose(got[0, 1, 1], 0.0)


def test_products_exact_and_small_addends_kept() -> None:
    """C = 2^24 plus sixteen products of 1: the exact sum 2^24 + 16 is representable and kept."""
    w = new_wave("gfx942")
    w.v[32:34] = np.uint32(0x3C003C00)
    w.v[64:66] = np.uint32(0x3C003C00)
    w.v[0:4] = np.float32(2.0 ** 24).view(np.uint32)
    decode("v_mfma_f32_16x16x16_f16 v[0:3], v[32:33], v[64:65], v[0:3]", "gfx942")(w)
    assert (w.v[0:4].view(np.float32) == 2.0 ** 24 + 16).all()


# ---------------------------------------------------------------------------
# modifiers

def put_4x4x4(rng: np.random.Generator) -> tuple[Wave, np.ndarray, np.ndarray]:
    w = new_wave("gfx942")
    av = small_ints(rng, (4, 64), 3)          # element e of lane l
    bv = small_ints(rng, (4, 64), 3)
    w.v[32:34] = pack(encode(av, "f16", "gfx942"), 16)
    w.v[64:66] = pack(encode(bv, "f16", "gfx942"), 16)
    return w, av, bv


@pytest.mark.parametrize(("cbsz", "abid"), [(4, 0), (4, 3), (4, 15), (2, 1), (1, 1)])
def test_4x4x4_cbsz_abid_broadcast_a(cbsz: int, abid: int) -> None:
    w, av, bv = put_4x4x4(np.random.default_rng(cbsz * 16 + abid))
    decode(f"v_mfma_f32_4x4x4_16b_f16 v[0:3], v[32:33], v[64:65], 0 cbsz:{cbsz} abid:{abid}", "gfx942")(w)
    d = w.v[0:4].view(np.float32)
    for lane in range(64):
        blk = lane // 4
        src = blk - blk % (1 << cbsz) + abid     # block whose A is used (§3.5)
        for r in range(4):
            assert d[r, lane] == (av[:, 4 * src + r] * bv[:, lane]).sum()


@pytest.mark.parametrize("blgp", range(1, 8))
def test_4x4x4_blgp_b_lane_pattern(blgp: int) -> None:
    src_of = [lambda x: x, lambda x: x % 32, lambda x: 32 + x % 32, lambda x: (x + 16) % 64, lambda x: x % 16,
              lambda x: 16 + x % 16, lambda x: 32 + x % 16, lambda x: 48 + x % 16][blgp]
    w, av, bv = put_4x4x4(np.random.default_rng(100 + blgp))
    decode(f"v_mfma_f32_4x4x4_16b_f16 v[0:3], v[32:33], v[64:65], 0 blgp:{blgp}", "gfx942")(w)
    d = w.v[0:4].view(np.float32)
    for lane in range(64):
        for r in range(4):
            assert d[r, lane] == (av[:, 4 * (lane // 4) + r] * bv[:, src_of(lane)]).sum()


@pytest.mark.parametrize(("text", "arch", "match"), [
    ("v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3] cbsz:1", "gfx942", "single-block"),
    ("v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3] blgp:2", "gfx942", "single-block"),
    ("v_mfma_f32_4x4x4_16b_f16 v[0:3], v[4:5], v[6:7], v[0:3] cbsz:2 abid:4", "gfx942", "illegal"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7] neg_lo:[1,0,0] neg_hi:[1,0,0]", "gfx1100",
     "neg_lo"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7] neg_lo:[0,0,1]", "gfx1201", "neg_lo"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7] op_sel:[0,0,1]", "gfx1100", "op_sel"),
    ("v_mfma_f32_16x16x32_f16 v[0:3], v[4:7], v[8:11], v[0:3]", "gfx942", "does not exist on gfx942"),
    ("v_wmma_f32_16x16x16_fp8_fp8 v[0:7], v[8:9], v[12:13], v[0:7]", "gfx1100", "does not exist"),
    ("v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3]", "gfx1201", "does not exist"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]", "gfx1100", "expected 8"),
    ("v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3] clamp", "gfx942", "not supported"),
])
def test_decode_errors(text: str, arch: str, match: str) -> None:
    with pytest.raises(EmulatorError, match=match):
        decode(text, arch)


# ---------------------------------------------------------------------------
# execution-time checks

@pytest.mark.parametrize(("text", "arch"), [
    ("v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3]", "gfx942"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]", "gfx1201"),
])
def test_partial_exec_raises_at_execution(text: str, arch: str) -> None:
    h = decode(text, arch)                   # decoding is fine
    w = new_wave(arch)
    w.set_exec((1 << w.n) - 2)
    with pytest.raises(EmulatorError, match="EXEC all ones"):
        h(w)


def test_gfx11_unreplicated_halves_raise() -> None:
    h = decode("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]", "gfx1151")
    w = new_wave("gfx1151")
    h(w)                                      # all zero: replicated
    w.v[9, 20] = 1
    with pytest.raises(EmulatorError, match="lanes 16-31"):
        h(w)


def test_old_bf16_1k_spelling_is_the_same_instruction() -> None:
    rng = np.random.default_rng(9)
    regs = rng.integers(0, 1 << 32, (8, 64), dtype=np.uint64).astype(np.uint32) & np.uint32(0x3FFF3FFF)
    outs = []
    for mn in ("v_mfma_f32_16x16x16_bf16", "v_mfma_f32_16x16x16bf16_1k"):
        w = new_wave("gfx942")
        w.v[4:12] = regs
        decode(f"{mn} v[0:3], v[4:5], v[6:7], v[8:11]", "gfx942")(w)
        outs.append(w.v[0:4].copy())
    np.testing.assert_array_equal(outs[0], outs[1])


# ---------------------------------------------------------------------------
# lockstep cohorts: the batched handler against the one-wave handler, wave by wave

_BIG_TINY = {"f16": (2.0 ** 15, 2.0 ** -12), "bf16": (2.0 ** 60, 2.0 ** -60), "fp8": (2.0 ** 8, 2.0 ** -9),
             "bf8": (2.0 ** 15, 2.0 ** -16)}


def _wave_values(rng: np.random.Generator, kind: str, shape: tuple[int, ...], typ: str, arch: str,
                 side: str = "a") -> np.ndarray:
    """Operand values of one wave: ordinary, all zero, tiny, a NaN / inf among ordinary ones, or
    "cancel": products big, tiny .. tiny, -big along K, whose sum float64 loses in any order
    (the batched matmul is not exact for that wave; with C = 0 the tiny sum is the result)."""
    x = rng.standard_normal(shape)
    if kind == "zero":
        x *= 0
    elif kind == "tiny":
        x *= 2.0 ** -20
    elif kind == "cancel":
        big, tiny = _BIG_TINY[typ]
        x = np.full(shape, tiny)
        k_axis = -1 if side == "a" else -2
        first, last = [slice(None)] * len(shape), [slice(None)] * len(shape)
        first[k_axis], last[k_axis] = 0, -1
        x[tuple(first)] = big
        x[tuple(last)] = -big if side == "a" else big
    with np.errstate(over="ignore"):
        y = x.astype(np_type(typ, arch)).astype(np.float64)
    y = np.where(np.isfinite(y), y, 1.0)
    if kind == "nan":
        y.flat[3] = np.nan
    elif kind == "inf" and typ in ("f16", "bf16"):
        y.flat[5] = np.inf
    return y


COHORT_MIXES = [("ordinary", "ordinary", "ordinary"), ("ordinary", "cancel", "ordinary", "tiny"),
                ("tiny", "ordinary", "zero", "cancel"), ("nan", "ordinary", "inf", "cancel")]


@pytest.mark.parametrize(("arch", "mnemonic"), [("gfx950", "v_mfma_f32_16x16x32_f16"),
                                                ("gfx950", "v_mfma_f32_16x16x32_bf16"),
                                                ("gfx942", "v_mfma_f32_16x16x32_fp8_bf8"),
                                                ("gfx1201", "v_wmma_f32_16x16x16_f16"),
                                                ("gfx1201", "v_wmma_bf16_16x16x16_bf16"),
                                                ("gfx1100", "v_wmma_f16_16x16x16_f16")])
@pytest.mark.parametrize("mix", COHORT_MIXES, ids=["-".join(m) for m in COHORT_MIXES])
def test_cohort_handler_matches_one_wave_handler(arch: str, mnemonic: str, mix: tuple[str, ...]) -> None:
    """A cohort of waves whose values need different exact paths (the batched matmul for some, the
    two-limb or compensated sum for others, NaN/inf) gives each wave the one-wave handler's bits."""
    import dataclasses

    from hipskinny.emulator.state import Cohort
    c = next(x for ar, x in CASES if ar == arch and x.mnemonic == mnemonic)
    rng = np.random.default_rng(zlib.crc32((arch + mnemonic + "".join(mix)).encode()))
    gfx, n, _ = ARCH[arch]
    text = inst_text(c, arch)
    mn, ops, mods = parse_instruction(text)
    inst = Inst(0x1000, 8, text, mn, ops, mods, b"")
    factory = lookup(mn)[0]
    single, lockstep = factory(inst, ctx_of(arch)), factory(inst, dataclasses.replace(ctx_of(arch), cohort=True))
    vfile = np.zeros((256, n * len(mix)), np.uint32)
    waves, want = [], []
    for k, kind in enumerate(mix):
        a = _wave_values(rng, kind, (c.blocks, c.m, c.k), c.a_type, arch)
        b = _wave_values(rng, kind, (c.blocks, c.k, c.n), c.b_type, arch, side="b")
        cm = _wave_values(rng, "zero" if kind == "cancel" else "ordinary", (c.blocks, c.m, c.n), c.d_type, arch)
        w = Wave(n, gfx == 9, None, k, v=vfile[:, k * n:(k + 1) * n])
        w.set_exec((1 << n) - 1)
        ar = a_regs(c)
        w.v[32:32 + ar] = place_a(c, a, c.a_type, arch)
        w.v[64:64 + ar] = place_b(c, b, c.b_type, arch)
        w.v[0:d_regs(c, arch)] = place_c(c, cm, arch)
        alone = new_wave(arch)
        alone.v[:] = w.v
        with np.errstate(all="ignore"):      # as a launch runs them: inf and NaN are results, not warnings
            single(alone)
        want.append(alone.v[0:d_regs(c, arch)].copy())
        waves.append(w)
    cohort = Cohort(waves, vfile, None, None)
    cohort.refresh()
    with np.errstate(all="ignore"):
        lockstep(cohort)
    for k, w in enumerate(waves):
        np.testing.assert_array_equal(w.v[0:d_regs(c, arch)], want[k], err_msg=f"wave {k} ({mix[k]})")
