"""EXEC bookkeeping of the emulator's Wave (a Python int plus a cached lane mask, mirrored
into the EXEC SGPRs) and the write paths that depend on it: every way an instruction
can write EXEC must update the mask, and the all-lanes fast paths must leave inactive
lanes untouched exactly like the masked ones."""

from __future__ import annotations

import numpy as np
import pytest

from hipskinny.emulator.listing import Inst, parse_instruction
from hipskinny.emulator.ops import DecodeContext, load_all, lookup
from hipskinny.emulator.state import EXEC_HI, EXEC_LO, Wave, lane_mask

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ARCH = {"gfx942": (9, 64, "fnuz"), "gfx1100": (11, 32, None), "gfx1201": (12, 32, "ocp")}


def wave(arch: str, exec_mask: int | None = None) -> Wave:
    gfx, n, _ = ARCH[arch]
    w = Wave(n, gfx == 9, None, 0)
    w.set_exec((1 << n) - 1 if exec_mask is None else exec_mask)
    return w


def run(text: str, w: Wave, arch: str) -> None:
    load_all()
    gfx, n, f8 = ARCH[arch]
    mnemonic, ops, mods = parse_instruction(text)
    found = lookup(mnemonic)
    assert found is not None, mnemonic
    found[0](Inst(0x1000, 8, text, mnemonic, ops, mods, b""), DecodeContext(arch, gfx, n, f8, {}, {}))(w)


def lanes_of(w: Wave) -> int:
    return sum(1 << int(i) for i in np.flatnonzero(w.mask))


def test_lane_masks_are_shared_read_only_and_full_is_one_object() -> None:
    m = lane_mask(64, 0xF0)
    assert m is lane_mask(64, 0xF0) and not m.flags.writeable
    assert list(np.flatnonzero(m)) == [4, 5, 6, 7]
    w = wave("gfx942")
    assert w.mask is w.full and w.full.all() and not w.full.flags.writeable
    w.set_exec(0x3)
    w.set_exec((1 << 64) - 1)
    assert w.mask is w.full
    assert lane_mask(32, (1 << 32) - 1) is wave("gfx1100").full


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_exec_mirrored_into_sgprs_both_ways(arch: str) -> None:
    n = ARCH[arch][1]
    w = wave(arch, exec_mask=0x1234_5678_9ABC_DEF0 & ((1 << n) - 1))
    assert w.s[EXEC_LO] == 0x9ABC_DEF0
    if w.n == 64:
        assert w.s[EXEC_HI] == 0x1234_5678
        assert w.sget(EXEC_LO, 2) == w.exec == 0x1234_5678_9ABC_DEF0
    assert lanes_of(w) == w.exec
    w.sset(EXEC_LO, 0x0000_00FF)              # a write to exec_lo through the SGPR file
    assert w.exec & 0xFFFF_FFFF == 0xFF and lanes_of(w) == w.exec


def test_salu_writes_to_exec_update_the_mask() -> None:
    w = wave("gfx942")
    w.s[2], w.s[3] = 0x0000_000F, 0x8000_0000
    run("s_mov_b64 exec, s[2:3]", w, "gfx942")
    assert w.exec == 0x8000_0000_0000_000F and lanes_of(w) == w.exec
    w.s[4], w.s[5] = 0x3, 0
    run("s_and_saveexec_b64 s[6:7], s[4:5]", w, "gfx942")
    assert w.sget(6, 2) == 0x8000_0000_0000_000F and w.exec == 0x3 and lanes_of(w) == 0x3
    run("s_or_b64 exec, exec, s[6:7]", w, "gfx942")
    assert w.exec == 0x8000_0000_0000_000F and lanes_of(w) == w.exec
    w1 = wave("gfx1100")
    w1.s[9] = 0x0F0F
    run("s_mov_b32 exec_lo, s9", w1, "gfx1100")
    assert w1.exec == 0x0F0F and lanes_of(w1) == 0x0F0F
    run("s_mov_b32 exec_hi, 0", w1, "gfx1100")       # wave32: exec_hi is not part of EXEC
    assert w1.exec == 0x0F0F


def test_vector_writes_to_exec_update_the_mask() -> None:
    w = wave("gfx942")
    w.v[1] = np.arange(64, dtype=np.uint32)
    run("v_cmp_gt_u32_e64 exec, 5, v1", w, "gfx942")       # an SGPR-pair destination that is EXEC
    assert w.exec == 0x1F and lanes_of(w) == 0x1F
    w1 = wave("gfx1201")
    w1.v[2][:] = 0x00FF
    run("v_readfirstlane_b32 exec_lo, v2", w1, "gfx1201")
    assert w1.exec == 0xFF and lanes_of(w1) == 0xFF


@pytest.mark.parametrize("exec_mask", [None, 0x0000_FFFF_0000_00F1])
def test_fast_and_masked_writes_agree(exec_mask: int | None) -> None:
    """Typed 32/64-bit results, carries, compares, DPP and loads of the fast path leave inactive lanes
    (and their carry bits) alone."""
    w = wave("gfx942", exec_mask)
    rng = np.random.default_rng(7)
    w.v[:16] = rng.integers(0, 2**32, (16, 64), dtype=np.uint64).astype(np.uint32)
    w.v[1] = np.float32(1.5).view(np.uint32)
    before = w.v.copy()
    active = w.mask.copy()
    run("v_add_f32_e32 v10, v1, v1", w, "gfx942")
    run("v_add_co_u32_e32 v11, vcc, v2, v3", w, "gfx942")
    carry = w.sget(106, 2)
    run("v_lshlrev_b64 v[12:13], 3, v[4:5]", w, "gfx942")
    run("v_mov_b32_dpp v14, v5 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1", w, "gfx942")
    for r in (10, 11, 12, 13, 14):
        assert np.array_equal(w.v[r][~active], before[r][~active]), r
    assert np.all(w.v[10][active] == np.float32(3.0).view(np.uint32))
    s = w.v[2].astype(np.uint64) + w.v[3]
    assert np.array_equal(w.v[11][active], (s & 0xFFFF_FFFF).astype(np.uint32)[active])
    assert carry == sum(1 << i for i in range(64) if active[i] and s[i] >> 32)
    full = (before[4].astype(np.uint64) | before[5].astype(np.uint64) << np.uint64(32)) << np.uint64(3)
    assert np.array_equal(w.v[12][active], (full & 0xFFFF_FFFF).astype(np.uint32)[active])
    assert np.array_equal(w.v[13][active], (full >> np.uint64(32)).astype(np.uint32)[active])
    shifted = np.where(np.arange(64) % 16 == 0, 0, np.roll(before[5], 1))
    assert np.array_equal(w.v[14][active], shifted[active])


@pytest.mark.parametrize("op", ["add_u32", "sub_u32", "swap_b32", "and_b32", "or_b32", "xor_b32", "max_u32",
                                "min_u32", "max_i32", "min_i32", "inc_u32", "dec_u32", "add_f32", "cmpswap_b32"])
def test_atomics_on_distinct_words_match_lane_order(op: str) -> None:
    """An atomic whose active lanes hit distinct dwords runs as one array operation; lanes that
    share a word are serialised in lane order. Both give what one lane after another gives, and
    return the old values to the active lanes only."""
    from collections import Counter
    from types import SimpleNamespace

    from hipskinny.emulator.memory import Memory

    def s32(x: int) -> int:
        return x - (1 << 32) if x >> 31 else x

    def f32_add(o: int, v: int) -> int:
        total = np.float32(np.uint32(o).view(np.float32)) + np.float32(np.uint32(v).view(np.float32))
        return int(np.float32(total).view(np.uint32))

    # the ISA's per-lane operations, on Python ints (the reference for both of the emulator's paths)
    lane_op = {"add_u32": lambda o, v: (o + v) & 0xFFFFFFFF, "sub_u32": lambda o, v: (o - v) & 0xFFFFFFFF,
               "swap_b32": lambda o, v: v, "and_b32": lambda o, v: o & v, "or_b32": lambda o, v: o | v,
               "xor_b32": lambda o, v: o ^ v, "max_u32": max, "min_u32": min,
               "max_i32": lambda o, v: o if s32(o) >= s32(v) else v,
               "min_i32": lambda o, v: o if s32(o) <= s32(v) else v,
               "inc_u32": lambda o, v: 0 if o >= v else o + 1,
               "dec_u32": lambda o, v: v if o == 0 or o > v else o - 1, "add_f32": f32_add}

    rng = np.random.default_rng(3)
    cells = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    cells[:8] = np.float32([1.5, -0.0, np.inf, -2.0, 3e38, 1e-45, np.nan, 7.0]).view(np.uint32)
    vals = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    vals[:8] = np.float32([2.5, 0.0, -np.inf, 2.0, 3e38, -1e-45, 1.0, -7.0]).view(np.uint32)
    cmps = np.where(rng.random(64) < 0.5, cells, vals ^ np.uint32(1))
    for words in (np.arange(64), rng.integers(0, 16, 64)):      # distinct, then shared words
        mem = Memory()
        base = mem.alloc(4 * 64)
        mem.view(base, 4 * 64).view(np.uint32)[:] = cells
        w = wave("gfx942", exec_mask=(1 << 64) - 1 - (1 << 9))   # lane 9 inactive
        w.group = SimpleNamespace(mem=mem, stats=SimpleNamespace(bytes_loaded=Counter(), bytes_stored=Counter()))
        w.v[2], w.v[3] = base + 4 * words.astype(np.uint64) & 0xFFFFFFFF, (base + 4 * words.astype(np.uint64)) >> 32
        w.v[4], w.v[5] = vals, cmps
        w.v[6] = 0xDEAD
        run(f"global_atomic_{op} v6, v[2:3], v[4:5], off sc0" if op == "cmpswap_b32"
            else f"global_atomic_{op} v6, v[2:3], v4, off sc0", w, "gfx942")
        want, olds = cells.copy(), np.full(64, 0xDEAD, np.uint32)
        for lane in range(64):
            if lane == 9:
                continue
            old = int(want[words[lane]])
            if op == "cmpswap_b32":
                new = int(vals[lane]) if old == int(cmps[lane]) else old
            else:
                new = lane_op[op](old, int(vals[lane]))
            want[words[lane]], olds[lane] = new, old
        np.testing.assert_array_equal(mem.view(base, 4 * 64).view(np.uint32), want)
        np.testing.assert_array_equal(w.v[6], olds)
        assert w.group.stats.bytes_loaded["global"] == w.group.stats.bytes_stored["global"] == 4 * 63
