"""Wave state and operand access.

Scalar registers live in one uint32 array indexed by `SREG` names below (not by
the hardware encoding, which differs between generations): s0..s105, then VCC,
TTMPs, M0, NULL and EXEC. Vector registers are a (256, wave_size) uint32 array;
on gfx9 the AGPRs are a second one.

EXEC lives in `Wave.exec` (a Python int) and its per-lane bool mask in
`Wave.mask`; both are mirrored into the two EXEC SGPR slots, so any read of
exec as a register sees it. Every write to EXEC must go through `set_exec` (or
`sset`, which routes EXEC slots there): writing ``w.s[EXEC_LO]`` directly leaves
the mask stale. Lane masks are shared read-only arrays cached by value
(`lane_mask`); the all-lanes one is a fixed object (`Wave.full`), so handlers
test ``mask is w.full`` to skip masked copies.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import EmulatorError

VCC_LO, VCC_HI = 106, 107
TTMP0 = 108
M0, NULL, EXEC_LO, EXEC_HI = 124, 125, 126, 127
FLAT_SCRATCH_LO, FLAT_SCRATCH_HI = 102, 103   # gfx9 only; aliases of s102/s103
NUM_SREGS = 128

RUNNING, AT_BARRIER, DONE = 0, 1, 2

_NAMED = {"vcc": (VCC_LO, 2), "vcc_lo": (VCC_LO, 1), "vcc_hi": (VCC_HI, 1), "exec": (EXEC_LO, 2),
          "exec_lo": (EXEC_LO, 1), "exec_hi": (EXEC_HI, 1), "m0": (M0, 1), "null": (NULL, 1),
          "flat_scratch": (FLAT_SCRATCH_LO, 2), "flat_scratch_lo": (FLAT_SCRATCH_LO, 1),
          "flat_scratch_hi": (FLAT_SCRATCH_HI, 1)}

# Inline float constants by operand width (bit patterns).
_F32 = {0.5: 0x3F000000, -0.5: 0xBF000000, 1.0: 0x3F800000, -1.0: 0xBF800000, 2.0: 0x40000000,
        -2.0: 0xC0000000, 4.0: 0x40800000, -4.0: 0xC0800000, 0.15915494: 0x3E22F983}
_F16 = {0.5: 0x3800, -0.5: 0xB800, 1.0: 0x3C00, -1.0: 0xBC00, 2.0: 0x4000, -2.0: 0xC000, 4.0: 0x4400,
        -4.0: 0xC400, 0.15915494: 0x3118}
_F64 = {0.5: 0x3FE0000000000000, -0.5: 0xBFE0000000000000, 1.0: 0x3FF0000000000000,
        -1.0: 0xBFF0000000000000, 2.0: 0x4000000000000000, -2.0: 0xC000000000000000,
        4.0: 0x4010000000000000, -4.0: 0xC010000000000000, 0.15915494: 0x3FC45F306DC9C882}

_REG = re.compile(r"^(?P<kind>[sva]|ttmp)(?:(?P<one>\d+)|\[(?P<lo>\d+):(?P<hi>\d+)\])(?P<half>\.[lh])?$")


@dataclass(frozen=True)
class Operand:
    kind: str               # "s" (any scalar slot), "v", "a", "const", "scc", "off", "aperture"
    index: int = 0          # first register (internal scalar index for "s")
    count: int = 1          # registers in the tuple
    value: Any = None       # constants: int bit pattern or float (typed when read)
    neg: bool = False
    abs: bool = False
    half: str | None = None  # ".l" / ".h" for gfx11 true16 operands
    text: str = ""


@functools.lru_cache(maxsize=1 << 16)    # Operands are frozen; decoding parses the same texts again and again
def parse_operand(tok: str) -> Operand:
    text = tok
    neg = absm = False
    if tok.startswith("-") and not _is_number(tok):
        neg, tok = True, tok[1:]
    if tok.startswith("neg(") and tok.endswith(")"):
        neg, tok = True, tok[4:-1]
    if tok.startswith("|") and tok.endswith("|"):
        absm, tok = True, tok[1:-1]
    elif tok.startswith("abs(") and tok.endswith(")"):
        absm, tok = True, tok[4:-1]
    if tok.startswith("lit(") and tok.endswith(")"):
        tok = tok[4:-1]
    low = tok.lower()
    if low in _NAMED:
        i, c = _NAMED[low]
        return Operand("s", i, c, neg=neg, abs=absm, text=text)
    if low == "scc":
        return Operand("scc", text=text)
    if low == "off":
        return Operand("off", text=text)
    if low in ("src_shared_base", "src_private_base", "src_shared_limit", "src_private_limit"):
        return Operand("aperture", value=low, text=text)
    m = _REG.match(low)
    if m:
        lo = int(m.group("one") if m.group("one") is not None else m.group("lo"))
        hi = lo if m.group("one") is not None else int(m.group("hi"))
        kind = m.group("kind")
        if kind == "ttmp":
            kind, lo, hi = "s", lo + TTMP0, hi + TTMP0
        return Operand(kind, lo, hi - lo + 1, neg=neg, abs=absm, half=(m.group("half") or None) and m.group("half")[1],
                       text=text)
    if _is_number(tok):
        value: Any = int(tok, 0) if not _is_float(tok) else float(tok)
        return Operand("const", value=value, neg=neg, abs=absm, text=text)
    raise EmulatorError(f"cannot parse operand {text!r}")


def _is_float(tok: str) -> bool:
    return "." in tok and not tok.lower().startswith("0x")


def _is_number(tok: str) -> bool:
    try:
        float(tok) if _is_float(tok) else int(tok, 0)
        return True
    except ValueError:
        return False


def const_bits(op: Operand, width: int) -> int:
    """The bit pattern a constant operand supplies to a `width`-bit float/int operand."""
    v = op.value
    if isinstance(v, float):
        table = {16: _F16, 32: _F32, 64: _F64}[width]
        key = min(table, key=lambda k: abs(k - v))
        if abs(key - v) > 1e-6:
            raise EmulatorError(f"{v} is not an inline float constant")
        return table[key]
    return v & ((1 << width) - 1)   # negative inline ints sign-extend to the operand width


_FULL: dict[int, np.ndarray] = {}
_MASKS: dict[int, dict[int, np.ndarray]] = {}
_MASK_CACHE_LIMIT = 4096
_BITS_TO_BOOL = bytes.maketrans(b"01", b"\x00\x01")
_BOOL_TO_BITS = bytes.maketrans(b"\x00\x01", b"01")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def lane_mask(n: int, value: int) -> np.ndarray:
    """The per-lane bools of an n-bit lane mask: a shared, read-only array (do not modify)."""
    cache = _MASKS.get(n)
    if cache is None:
        cache = _MASKS.setdefault(n, {})
    m = cache.get(value)
    if m is None:
        if value == (1 << n) - 1:
            m = _FULL.get(n)
            if m is None:
                m = _FULL[n] = _frozen(np.ones(n, bool))
        else:   # bit i of value -> lane i (frombuffer of bytes is read-only already)
            m = np.frombuffer(format(value, f"0{n}b")[::-1].encode().translate(_BITS_TO_BOOL), bool)
        if len(cache) >= _MASK_CACHE_LIMIT:
            cache.clear()
        cache[value] = m
    return m


def mask_bits(lanes: np.ndarray) -> int:
    """A per-lane bool array as an integer mask (bit i = lane i)."""
    if lanes.dtype != np.bool_:
        lanes = lanes.astype(bool)
    return int(lanes.tobytes().translate(_BOOL_TO_BITS)[::-1], 2)


class Wave:
    """Registers, program counter and status of one wavefront.

    `vf` / `vi` (`sf` / `si`) are float32 / int32 views of the VGPR file `v` (the
    SGPR file `s`), and `s64[k]` is the SGPR pair s[2k:2k+1] (low word first: the host is
    little-endian, as every byte view in the emulator assumes), so typed operands need no
    per-instruction view. None of these arrays is ever rebound.
    """

    def __init__(self, n: int, gfx9: bool, group: Any, index: int, *, s: np.ndarray | None = None,
                 v: np.ndarray | None = None, a: np.ndarray | None = None) -> None:
        """`s`, `v`, `a`: the wave's register files as views into its workgroup's (so that a
        lockstep `Cohort` sees the lanes of several waves as one array); fresh ones if not given."""
        self.n = n
        self.s = np.zeros(NUM_SREGS, np.uint32) if s is None else s
        self.sf = self.s.view(np.float32)
        self.si = self.s.view(np.int32)
        self.s64 = self.s.view(np.uint64)   # SGPR pairs s[2k:2k+1] (always even-aligned) as one uint64
        self.v = np.zeros((256, n), np.uint32) if v is None else v
        self.vf = self.v.view(np.float32)
        self.vi = self.v.view(np.int32)
        self.a = (np.zeros((256, n), np.uint32) if gfx9 else None) if a is None else a
        self.scc = 0
        self.pc = 0                   # index into the program's instruction list
        self.state = RUNNING
        self.group = group            # the Workgroup (LDS, barrier)
        self.index = index            # wave index inside the workgroup
        self.slot = index             # position among the waves run side by side (set by the dispatcher)
        self.lanes = np.arange(n, dtype=np.uint64)
        self.full = lane_mask(n, (1 << n) - 1)
        self.exec = 0
        self.mask = lane_mask(n, 0)
        self.steps = 0

    def exec_value(self) -> int:
        return self.exec

    def set_exec(self, value: int) -> None:
        value &= (1 << self.n) - 1
        self.exec = value
        self.mask = lane_mask(self.n, value)
        if self.n == 64:
            self.s64[EXEC_LO >> 1] = value
        else:
            self.s[EXEC_LO] = value

    def exec_from_sgprs(self) -> None:
        """Re-derive EXEC after a write that went to its SGPR slots."""
        self.set_exec(int(self.s64[EXEC_LO >> 1]) if self.n == 64 else int(self.s[EXEC_LO]))

    def exec_mask(self) -> np.ndarray:
        return self.mask

    def mask_bits(self, lanes: np.ndarray) -> int:
        """A per-lane bool array as an integer mask (bit i = lane i)."""
        return mask_bits(lanes)

    def sget(self, index: int, count: int = 1) -> int:
        if index == NULL:
            return 0
        if count == 1:
            return int(self.s[index])
        if not index & 1:
            return int(self.s64[index >> 1])
        return int(self.s[index]) | (int(self.s[index + 1]) << 32)

    def sset(self, index: int, value: int, count: int = 1) -> None:
        if index == NULL:
            return
        self.s[index] = value & 0xFFFFFFFF
        if count == 2:
            self.s[index + 1] = (value >> 32) & 0xFFFFFFFF
        if index + count > EXEC_LO:
            self.exec_from_sgprs()


class Cohort:
    """Consecutive waves (of one workgroup or of several run side by side) executing one
    instruction as one: their lanes next to each other (member k's lane j is lane ``k * n + j``),
    so a lane-wise handler decoded for ``count * n`` lanes serves them all in one call.

    What a cohort executes as one is decided per instruction (`Program.cohort_plan`): lane-wise
    instructions whose SGPR sources hold the same value in every member (checked before each
    instruction), so the first member's scalar file stands for all; lane masks in SGPRs are
    each member's own (`read_mask`, `write_mask`). EXEC is per member: `refresh` rebuilds the
    cohort's lane mask after any member's EXEC may have changed. `group` is the members'
    workgroup, or a span of several whose LDS accesses land in each lane's own workgroup.
    """

    def __init__(self, waves: list[Wave], v: np.ndarray, a: np.ndarray | None, group: Any) -> None:
        first = waves[0]
        self.subgroups: list[list[Wave]] = []      # the members by workgroup
        for w in waves:
            if self.subgroups and self.subgroups[-1][0].group is w.group:
                self.subgroups[-1].append(w)
            else:
                self.subgroups.append([w])
        self.members = waves
        self.wave_n = first.n
        self.n = first.n * len(waves)
        self.v = v
        self.vf = v.view(np.float32)
        self.vi = v.view(np.int32)
        self.a = a
        self.s, self.sf, self.si, self.s64 = first.s, first.sf, first.si, first.s64
        self.group = group                         # its workgroup, or a span of several (LDS, memory)
        self.index = f"{first.index}..{waves[-1].index}"
        self.full = lane_mask(self.n, (1 << self.n) - 1)
        self.exec = 0
        self.mask = self.full
        self._execs: tuple[int, ...] = ()
        self._parts: dict[tuple[int, int], Cohort] = {}

    sget = Wave.sget            # the first member's SGPRs stand for all (checked equal before the instruction)

    def each(self, fn: Callable[[Wave], None]) -> None:
        """Run a one-wave handler on every member, in order, on the members' own registers."""
        self.finish()
        for w in self.members:
            fn(w)
        self.reload()

    def part(self, first: int, count: int) -> Cohort:
        """Members ``first .. first + count - 1`` (of one workgroup) as a cohort on this cohort's
        lanes: for a lane-wise instruction whose SGPRs differ between members (per-wave offsets),
        run once per run of members that agree rather than wave by wave."""
        key = (first, count)
        found = self._parts.get(key)
        if found is None:
            lanes = slice(first * self.wave_n, (first + count) * self.wave_n)
            sub = self.members[first:first + count]
            found = self._parts[key] = Cohort(sub, self.v[:, lanes], None if self.a is None else self.a[:, lanes],
                                              sub[0].group)
            found.finish, found.reload = self.finish, self.reload     # a gathered copy is the whole's
        return found

    def exec_value(self) -> int:
        return self.exec

    def finish(self) -> None:
        """Before members run alone, and when the cohort stops: a gathered cohort writes its registers back."""

    def reload(self) -> None:
        """After members ran alone: a gathered cohort copies their registers in again."""

    def refresh(self) -> None:
        execs = tuple(w.exec for w in self.members)
        if execs != self._execs:
            self._execs = execs
            value = 0
            for k, e in enumerate(execs):
                value |= e << (k * self.wave_n)
            self.exec = value
            self.mask = lane_mask(self.n, value)

    def exec_mask(self) -> np.ndarray:
        return self.mask

    def mask_bits(self, lanes: np.ndarray) -> int:
        return mask_bits(lanes)

    def set_exec(self, value: int) -> None:
        """Each member's lanes of `value` as its EXEC (v_cmpx)."""
        n = self.wave_n
        low = (1 << n) - 1
        for w in self.members:
            w.set_exec(value & low)
            value >>= n
        self.refresh()

    def read_mask(self, i: int, count: int) -> np.ndarray:
        """Per-lane bools of the lane masks the members hold in SGPR `i` (an aligned pair if `count` is 2)."""
        n, value, shift = self.wave_n, 0, 0
        if count == 2:
            k = i >> 1
            for w in self.members:
                value |= int(w.s64[k]) << shift
                shift += n
        else:
            for w in self.members:
                value |= int(w.s[i]) << shift
                shift += n
        return lane_mask(self.n, value)

    def write_mask(self, i: int, count: int, lanes: np.ndarray) -> None:
        """Each member's lanes of `lanes` as its lane mask in SGPR `i` (not EXEC)."""
        bits, n = mask_bits(lanes), self.wave_n
        low = (1 << n) - 1
        if count == 2:
            k = i >> 1
            for w in self.members:
                w.s64[k] = bits & low
                bits >>= n
        else:
            for w in self.members:
                w.s[i] = bits & low
                bits >>= n


class GatheredCohort(Cohort):
    """A cohort of waves that are not next to each other (one wave of each workgroup in a branch
    only it takes, say): their VGPR and AGPR rows in use are copied into a file of their own while
    the cohort runs, and back before any member runs an instruction alone and when it stops.

    `runs` are the members' lanes in the batch's files as (first, stop) ranges of consecutive
    lanes: copied as slices, which is ten times faster than gathering by lane index."""

    def __init__(self, waves: list[Wave], vfile: np.ndarray, afile: np.ndarray | None, group: Any,
                 runs: list[list[int]], vrows: int, arows: int, v: np.ndarray, a: np.ndarray | None) -> None:
        """`v`, `a`: where the copy lives (as many lanes as the members have; the batch's scratch
        files, shared by its gathered cohorts, as one runs at a time and loads them first)."""
        self._vfile, self._afile, self._vrows, self._arows = vfile, afile, vrows, arows
        self._runs = []
        at = 0
        for first, stop in runs:
            self._runs.append((slice(first, stop), slice(at, at + stop - first)))
            at += stop - first
        super().__init__(waves, v, a, group)
        self.reload()

    def reload(self) -> None:
        rows, arows = self._vrows, self._arows
        for src, dst in self._runs:
            self.v[:rows, dst] = self._vfile[:rows, src]
            if self.a is not None:
                self.a[:arows, dst] = self._afile[:arows, src]

    def finish(self) -> None:
        rows, arows = self._vrows, self._arows
        for src, dst in self._runs:
            self._vfile[:rows, src] = self.v[:rows, dst]
            if self.a is not None:
                self._afile[:arows, src] = self.a[:arows, dst]


Reader = Callable[[Wave], Any]
