"""Static numbers from the shipped code objects: registers, LDS, spills, scratch,
occupancy, and the main loop's instructions by class (from the listing build_scripts
writes next to each code object, classified exactly as the emulator counts them)."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from hipskinny import registry
from hipskinny.arch import ARCHS
from hipskinny.codeobject import CodeObject
from hipskinny.emulator.listing import Inst, Listing, read_table
from hipskinny.emulator.ops import load_all, lookup

from . import hardware


def inst_class(mnemonic: str) -> str:
    """The emulator's class for a mnemonic ("unknown" if it has none)."""
    found = lookup(mnemonic)
    return found[1] if found else "unknown"


_WIDTH = {"dwordx4": 16, "b128": 16, "dwordx3": 12, "b96": 12, "dwordx2": 8, "b64": 8, "dword": 4, "b32": 4,
          "ushort": 2, "short": 2, "u16": 2, "i16": 2, "b16": 2, "short_d16": 2, "ubyte": 1, "sbyte": 1,
          "u8": 1, "i8": 1}


def load_bytes(mnemonic: str) -> int:
    """Bytes per lane of a global/buffer load (0 for anything else)."""
    if not mnemonic.startswith(("global_load", "buffer_load", "flat_load")):
        return 0
    parts = mnemonic.split("_")[2:]
    for n in range(len(parts), 0, -1):       # longest suffix first: short_d16_hi -> short_d16
        w = _WIDTH.get("_".join(parts[:n]))
        if w:
            return w
    return 0


def _branch_target(inst: Inst) -> int | None:
    if not inst.mnemonic.startswith(_BRANCHES) or not inst.operands:
        return None
    try:
        simm = int(inst.operands[0], 0) & 0xFFFF
    except ValueError:
        return None
    simm -= 0x10000 if simm & 0x8000 else 0
    return inst.addr + 4 + 4 * simm


_BRANCHES = ("s_branch", "s_cbranch")


class Body:
    """One kernel's instructions in a verified listing: ``mnemonics`` and ``addrs`` of all of them;
    an `Inst` is made only for those read (`inst`, `insts`: a code object holds up to a quarter million)."""

    def __init__(self, listing: Listing, lo: int, hi: int) -> None:
        self._listing, self._lo, self._hi = listing, lo, hi
        self.mnemonics = listing.mnemonics(lo, hi)
        self.addrs = listing.addrs[lo:hi]

    def inst(self, i: int) -> Inst:
        return self._listing[self._lo + i]

    def insts(self) -> list[Inst]:
        return self._listing[self._lo:self._hi]


@dataclass
class KernelStatic:
    arch: str
    family: str
    name: str
    config: dict[str, Any]
    vgpr: int
    agpr: int
    sgpr: int
    lds_static: int
    vgpr_spills: int
    sgpr_spills: int
    private_segment: int
    wave_size: int
    waves: int                                             # per workgroup (launch bound / wave size)
    occupancy_terms: dict[str, int]
    manifest_occupancy: int | None
    instructions: int                                      # in the whole kernel
    mnemonics: frozenset[str]
    loop: dict[str, int] = field(default_factory=dict)     # main loop: class -> instructions
    loop_load_bytes: int = 0                               # global bytes one lane loads per iteration
    loop_span: tuple[int, int] = (0, 0)                    # byte offsets in the kernel

    @property
    def occupancy(self) -> int:
        return min(self.occupancy_terms.values())

    def occupancy_with(self, dynamic_lds: int) -> dict[str, int]:
        info = ARCHS[self.arch]
        return hardware.occupancy_terms(info, self.vgpr, self.sgpr, self.lds_static + dynamic_lds, self.waves)

    @property
    def loop_valu_per_byte(self) -> float:
        """VALU wave-instructions per global byte in the main loop (one wave, one iteration)."""
        valu = self.loop.get("valu", 0) + self.loop.get("trans", 0)
        return valu / (self.loop_load_bytes * self.wave_size) if self.loop_load_bytes else 0.0

    def row(self) -> dict[str, Any]:
        return {"arch": self.arch, "family": self.family, "kernel": self.name, "config": self.config,
                "vgpr": self.vgpr, "agpr": self.agpr, "sgpr": self.sgpr, "lds_static": self.lds_static,
                "vgpr_spills": self.vgpr_spills, "sgpr_spills": self.sgpr_spills,
                "private_segment": self.private_segment, "occupancy": self.occupancy,
                "occupancy_terms": self.occupancy_terms, "manifest_occupancy": self.manifest_occupancy,
                "instructions": self.instructions, "main_loop": self.loop,
                "main_loop_load_bytes_per_lane": self.loop_load_bytes, "main_loop_span": list(self.loop_span),
                "main_loop_valu_per_byte": self.loop_valu_per_byte}


def _main_loop(body: Body) -> tuple[int, int] | None:
    """Index range [first, last] of the main loop: among innermost loops (backward branches
    whose range holds no other back edge), the one loading the most global bytes per
    iteration, then the one with the most instructions."""
    mn = body.mnemonics
    branches = [body.inst(i) for i, m in enumerate(mn) if m.startswith(_BRANCHES)]
    if not branches:
        return None
    index = {a: i for i, a in enumerate(body.addrs)}
    loops = []
    for inst in branches:
        t = _branch_target(inst)
        if t is not None and t <= inst.addr and t in index:
            loops.append((index[t], index[inst.addr]))
    inner = [lp for lp in loops if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in loops)]
    if not inner:
        return None
    return max(inner, key=lambda lp: (sum(load_bytes(m) for m in mn[lp[0]:lp[1] + 1]), lp[1] - lp[0]))


def kernel_bodies(arch: str, family: str) -> tuple[dict[str, Any], list[tuple[Any, Body]]]:
    """One shipped code object's manifest entry and each kernel (its descriptor record) with its
    instructions in listing order (the whole listing verified against the binary first)."""
    image, entry = registry.read_verified(arch, family)
    code = CodeObject.parse(image, f"{arch}/{family}")
    table = resources.files("hipskinny.hsaco").joinpath(entry["instructions"]).read_bytes()
    insts, labels = read_table(table, code)
    insts.verify()
    starts = sorted(labels.values())
    addrs = insts.addrs                      # ascending: the listing is in address order
    out = []
    for kern in code.kernels:
        first = kern.entry
        end = starts[bisect.bisect_right(starts, first)] if starts and starts[-1] > first else 1 << 62
        out.append((kern, Body(insts, bisect.bisect_left(addrs, first), bisect.bisect_left(addrs, end))))
    return entry, out


def family_static(arch: str, family: str) -> list[KernelStatic]:
    """Every kernel of one shipped code object."""
    load_all()
    entry, kernels = kernel_bodies(arch, family)
    manifest_kernels = {k["name"]: k for k in entry["kernels"]}
    out = []
    info = ARCHS[arch]
    for kern, body in kernels:
        start = kern.entry
        mk = manifest_kernels.get(kern.name, {})
        ks = KernelStatic(
            arch=arch, family=family, name=kern.name, config=dict(mk.get("config", {})),
            vgpr=kern.vgpr_count, agpr=kern.agpr_count, sgpr=kern.sgpr_count,
            lds_static=kern.group_segment_fixed_size, vgpr_spills=kern.vgpr_spill_count,
            sgpr_spills=kern.sgpr_spill_count, private_segment=kern.private_segment_fixed_size,
            wave_size=kern.wavefront_size, waves=kern.max_flat_workgroup_size // kern.wavefront_size,
            occupancy_terms=hardware.occupancy_terms(info, kern.vgpr_count, kern.sgpr_count,
                                                     kern.group_segment_fixed_size,
                                                     kern.max_flat_workgroup_size // kern.wavefront_size),
            manifest_occupancy=mk.get("occupancy"), instructions=len(body.mnemonics),
            mnemonics=frozenset(body.mnemonics))
        span = _main_loop(body)
        if span is not None:
            loop = body.mnemonics[span[0]:span[1] + 1]
            ks.loop = dict(Counter(inst_class(m) for m in loop))
            ks.loop_load_bytes = sum(load_bytes(m) for m in loop)
            ks.loop_span = (body.addrs[span[0]] - start, body.addrs[span[1]] - start)
        out.append(ks)
    return out


_KERNEL_SORT = re.compile(r"(\d+)")


def kernel_sort_key(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in _KERNEL_SORT.split(name)]
