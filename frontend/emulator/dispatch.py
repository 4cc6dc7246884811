"""Running one kernel launch: dispatch state exactly as hardware + HIP set it up,
then workgroups in order and the waves of a workgroup round-robin between barriers.

Deterministic by default. With a seed, workgroups run in a shuffled order and the
scheduler switches waves at random instruction boundaries, so a missing barrier
or a race changes the result.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..codeobject import Kernel
from ..errors import EmulatorError, EmulatorFault
from .memory import Memory
from .ops import Handler
from .program import Program
from .state import AT_BARRIER, DONE, RUNNING, TTMP0, Wave
from .stats import LaunchStats

DEFAULT_MAX_WAVE_STEPS = 20_000_000


class Workgroup:
    def __init__(self, gid: tuple[int, int, int], lds_bytes: int, mem: Memory, stats: LaunchStats,
                 strict_lds: bool = False) -> None:
        self.id = gid
        self.lds = np.zeros(-(-max(lds_bytes, 4) // 4) * 4, np.uint8)
        self.lds_size = lds_bytes
        self.lds_written = np.zeros(len(self.lds), bool) if strict_lds else None
        self.mem = mem
        self.stats = stats
        self.waves: list[Wave] = []
        self._lds_windows: dict[int, np.ndarray] = {}

    def lds_window(self, size: int) -> np.ndarray:
        """A view of the LDS whose row k is bytes k..k+size-1 (one row per lane access)."""
        w = self._lds_windows.get(size)
        if w is None:
            w = self._lds_windows[size] = as_strided(self.lds, (max(len(self.lds) - size + 1, 0), size), (1, 1))
        return w


def run_launch(program: Program, kernel: Kernel, mem: Memory, grid: tuple[int, int, int],
               block: tuple[int, int, int], kernarg_addr: int, packet_addr: int, queue_addr: int,
               dynamic_lds: int, seed: int | None = None, strict_lds: bool = False,
               max_wave_steps: int = DEFAULT_MAX_WAVE_STEPS) -> LaunchStats:
    kd = kernel.descriptor
    wave_size = kd.wave_size
    if wave_size != program.arch.wave_size:
        raise EmulatorError(f"kernel {kernel.name} is wave{wave_size}; the emulator runs {program.arch.name} "
                            f"in wave{program.arch.wave_size} only")
    if kernel.private_segment_fixed_size or kd.enable_private_segment:
        raise EmulatorError(f"kernel {kernel.name} uses scratch memory, which the emulator does not provide")
    threads = block[0] * block[1] * block[2]
    if not 0 < threads <= kernel.max_flat_workgroup_size:
        raise EmulatorError(f"kernel {kernel.name}: block {block} is outside 1..{kernel.max_flat_workgroup_size} "
                            "threads")
    handlers = program.handlers_for(kernel)       # refuses a MODE the emulator does not implement
    stats = LaunchStats(kernel=kernel.name, arch=program.arch.name)
    entry = program.entry_index(kd.entry)
    user = {"dispatch_ptr": packet_addr, "queue_ptr": queue_addr, "kernarg_segment_ptr": kernarg_addr,
            "dispatch_id": 0}
    lds_bytes = kernel.group_segment_fixed_size + dynamic_lds
    if lds_bytes > program.arch.lds_per_workgroup:
        raise EmulatorError(f"kernel {kernel.name} needs {lds_bytes} bytes of LDS; {program.arch.name} has "
                            f"{program.arch.lds_per_workgroup} per workgroup")
    # Work-item ids of every thread of a block, packed as in v0 (x | y << 10 | z << 20).
    tid = np.arange(threads)
    tx, ty, tz = tid % block[0], (tid // block[0]) % block[1], tid // (block[0] * block[1])
    packed = (tx | (ty << 10) | (tz << 20)).astype(np.uint32)
    nwaves = -(-threads // wave_size)
    gfx9 = program.ctx.gfx == 9
    counts = [0] * len(program.insts)

    order = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    rng = random.Random(seed) if seed is not None else None
    if rng is not None:
        rng.shuffle(order)
    start = time.perf_counter()
    with np.errstate(all="ignore"):      # IEEE results (inf, NaN) are the kernel's, not warnings
        for gid in order:
            group = Workgroup(gid, lds_bytes, mem, stats, strict_lds)
            for wi in range(nwaves):
                w = Wave(wave_size, gfx9, group, wi)
                for name, first, count in kd.user_sgpr_layout():
                    if name not in user:
                        raise EmulatorError(f"kernel {kernel.name} enables user SGPR block {name!r}, "
                                            "which the emulator does not provide")
                    w.sset(first, user[name], count)
                s = kd.user_sgpr_count
                for axis, on in enumerate((kd.enable_sgpr_workgroup_id_x, kd.enable_sgpr_workgroup_id_y,
                                           kd.enable_sgpr_workgroup_id_z)):
                    if on:
                        w.s[s] = gid[axis]
                        s += 1
                if kd.enable_sgpr_workgroup_info:
                    w.s[s] = nwaves | (0x80000000 if wi == 0 else 0)
                if program.ctx.gfx >= 12:       # architected SGPRs: TTMP9 = x, TTMP7 = y | z << 16
                    w.s[TTMP0 + 9] = gid[0]
                    w.s[TTMP0 + 7] = gid[1] | (gid[2] << 16)
                lane_ids = packed[wi * wave_size:(wi + 1) * wave_size]
                w.v[0, :len(lane_ids)] = lane_ids
                w.set_exec((1 << len(lane_ids)) - 1)
                w.pc = entry
                group.waves.append(w)
            _run_group(program, handlers, group, counts, rng, max_wave_steps)
            stats.workgroups += 1
            stats.waves += nwaves
    stats.seconds = time.perf_counter() - start
    classes = Counter()
    mnemonics = Counter()
    from .ops import CLASSES
    for i, c in enumerate(counts):
        if c:
            classes[CLASSES[program.class_of(i)]] += c
            mnemonics[program.insts[i].mnemonic] += c
    stats.instructions = classes
    stats.mnemonics = mnemonics
    return stats


def _run_group(program: Program, handlers: list[Handler], group: Workgroup, counts: list[int],
               rng: random.Random | None, max_steps: int) -> None:
    waves = group.waves
    while True:
        runnable = [w for w in waves if w.state == RUNNING]
        if not runnable:
            waiting = [w for w in waves if w.state == AT_BARRIER]
            if not waiting:
                return
            for w in waiting:            # every live wave has arrived: release the barrier
                w.state = RUNNING
            group.stats.barriers += 1
            continue
        if rng is None:
            for w in runnable:
                _step(program, handlers, w, counts, max_steps, max_steps)
        else:
            w = rng.choice(runnable)
            _step(program, handlers, w, counts, rng.randint(1, 64), max_steps)


def _step(program: Program, handlers: list[Handler], w: Wave, counts: list[int], budget: int,
          max_steps: int) -> None:
    """Run `w` until it blocks, ends, or has executed `budget` instructions."""
    running = RUNNING
    n = 0
    i = w.pc
    try:
        while w.state == running and n < budget:
            i = w.pc
            w.pc = i + 1
            handlers[i](w)
            counts[i] += 1
            n += 1
    except EmulatorFault as e:
        raise EmulatorFault(f"{program.where(program.insts[i].addr)} ({program.arch.name}, wave {w.index} of "
                            f"workgroup {w.group.id}): {e}") from None
    except EmulatorError:
        raise
    except IndexError as e:
        if w.pc >= len(handlers):
            raise EmulatorError(f"wave ran past the end of the code ({program.where(program.insts[-1].addr)})") \
                from e
        raise EmulatorError(f"emulator bug at {program.where(program.insts[i].addr)}: {e!r}") from e
    except Exception as e:  # a bug in a handler: say where it happened
        raise EmulatorError(f"emulator failure at {program.where(program.insts[i].addr)} "
                            f"({program.insts[i].text!r}): {e!r}") from e
    w.steps += n
    if w.steps >= max_steps:
        raise EmulatorError(f"runaway wave: {w.steps} instructions without finishing "
                            f"({program.where(program.insts[w.pc].addr)}, {program.arch.name}); "
                            "raise max_wave_steps if the kernel really needs more")
    if w.state == DONE:
        return
