"""Running one kernel launch: dispatch state exactly as hardware + HIP set it up,
then workgroups in order, and inside a workgroup its waves between barriers.

Deterministic by default, in lockstep: the waves of a workgroup that stand at the
same instruction form a `Cohort` and execute a lane-wise instruction as one numpy
operation over all their lanes; anything else (scalar, branches, barriers, lane
crossings) each wave executes alone, in wave order, and waves whose PCs part run
separately (the lowest PC first) until they meet again. For a race-free kernel the
results are those of running the waves one after another.

With a seed, workgroups run in a shuffled order and the scheduler switches single
waves at random instruction boundaries, so a missing barrier or a race changes the
result.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..codeobject import Kernel
from ..errors import EmulatorError, EmulatorFault
from .memory import Memory
from .ops import Handler
from .program import LANEWISE, NOOP, LockstepCode, Program
from .state import AT_BARRIER, NUM_SREGS, RUNNING, TTMP0, Cohort, Wave
from .stats import LaunchStats

DEFAULT_MAX_WAVE_STEPS = 20_000_000


class _Codes(dict):
    """A launch's lockstep handlers by cohort size in lanes."""

    def __init__(self, program: Program, kernel: Kernel) -> None:
        super().__init__()
        self.program, self.kernel = program, kernel

    def __missing__(self, lanes: int) -> LockstepCode:
        found = self[lanes] = self.program.lockstep_code(self.kernel, lanes)
        return found


class Workgroup:
    def __init__(self, gid: tuple[int, int, int], lds_bytes: int, mem: Memory, stats: LaunchStats,
                 strict_lds: bool = False, nwaves: int = 1, wave_size: int = 64, gfx9: bool = False) -> None:
        self.id = gid
        # Register files of all waves, lanes side by side, so that any run of consecutive waves
        # is one view (`cohort`); each wave's files are views too.
        self.wave_size = wave_size
        self.vfile = np.zeros((256, nwaves * wave_size), np.uint32)
        self.afile = np.zeros((256, nwaves * wave_size), np.uint32) if gfx9 else None
        self.sfile = np.zeros((nwaves, NUM_SREGS), np.uint32)
        self._cohorts: dict[tuple[int, int], Cohort] = {}
        self.lds = np.zeros(-(-max(lds_bytes, 4) // 4) * 4, np.uint8)
        self.lds_size = lds_bytes
        self.lds_written = np.zeros(len(self.lds), bool) if strict_lds else None
        self.mem = mem
        self.stats = stats
        self.waves: list[Wave] = []
        self._lds_windows: dict[int, np.ndarray] = {}

    def new_wave(self, index: int, gfx9: bool) -> Wave:
        n = self.wave_size
        lanes = slice(index * n, (index + 1) * n)
        return Wave(n, gfx9, self, index, s=self.sfile[index], v=self.vfile[:, lanes],
                    a=None if self.afile is None else self.afile[:, lanes])

    def cohort(self, waves: list[Wave]) -> Cohort:
        """The cohort of `waves`, which are consecutive waves of this workgroup."""
        key = (waves[0].index, len(waves))
        found = self._cohorts.get(key)
        if found is None:
            n = self.wave_size
            lanes = slice(waves[0].index * n, (waves[-1].index + 1) * n)
            found = self._cohorts[key] = Cohort(waves, self.vfile[:, lanes],
                                                None if self.afile is None else self.afile[:, lanes])
        return found

    def lds_window(self, size: int) -> np.ndarray:
        """A view of the LDS whose row k is bytes k..k+size-1 (one row per lane access)."""
        w = self._lds_windows.get(size)
        if w is None:
            w = self._lds_windows[size] = as_strided(self.lds, (max(len(self.lds) - size + 1, 0), size), (1, 1))
        return w


def run_launch(program: Program, kernel: Kernel, mem: Memory, grid: tuple[int, int, int],
               block: tuple[int, int, int], kernarg_addr: int, packet_addr: int, queue_addr: int,
               dynamic_lds: int, seed: int | None = None, strict_lds: bool = False,
               max_wave_steps: int = DEFAULT_MAX_WAVE_STEPS, lockstep: bool = True) -> LaunchStats:
    """`lockstep=False` runs each wave alone between barriers (the emulator before cohorts; kept
    to compare against). A seeded run always schedules single waves."""
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
    counts: defaultdict[int, int] = defaultdict(int)     # instruction index -> wave-instructions

    order = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    rng = random.Random(seed) if seed is not None else None
    if rng is not None:
        rng.shuffle(order)
    lock = _Codes(program, kernel) if lockstep and rng is None and nwaves > 1 else None
    start = time.perf_counter()
    with np.errstate(all="ignore"):      # IEEE results (inf, NaN) are the kernel's, not warnings
        for gid in order:
            group = Workgroup(gid, lds_bytes, mem, stats, strict_lds, nwaves, wave_size, gfx9)
            for wi in range(nwaves):
                w = group.new_wave(wi, gfx9)
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
            _run_group(program, handlers, group, counts, rng, max_wave_steps, lock)
            stats.workgroups += 1
            stats.waves += nwaves
    stats.seconds = time.perf_counter() - start
    classes = Counter()
    mnemonics = Counter()
    from .ops import CLASSES
    for i, c in counts.items():
        if c:
            classes[CLASSES[program.class_of(i)]] += c
            mnemonics[program.insts[i].mnemonic] += c
    stats.instructions = classes
    stats.mnemonics = mnemonics
    return stats


def _run_group(program: Program, handlers: list[Handler], group: Workgroup, counts: defaultdict[int, int],
               rng: random.Random | None, max_steps: int, lock: _Codes | None) -> None:
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
        if rng is not None:
            w = rng.choice(runnable)
            _step(program, handlers, w, counts, rng.randint(1, 64), max_steps)
        elif lock is None or len(runnable) == 1:
            for w in runnable:
                _step(program, handlers, w, counts, max_steps, max_steps)
        else:
            _run_lockstep(program, handlers, lock, group, runnable, counts, max_steps)


def _run_lockstep(program: Program, handlers: list[Handler], lock: _Codes, group: Workgroup,
                  waves: list[Wave], counts: defaultdict[int, int], max_steps: int) -> None:
    """Run `waves` until each has blocked or ended. The waves at the lowest PC go first, as one
    cohort when they are consecutive, and stop where they reach another wave's PC, so the two
    groups merge there."""
    while True:
        live = [w for w in waves if w.state == RUNNING]
        if not live:
            return
        lo = min(w.pc for w in live)
        members = [w for w in live if w.pc == lo]
        stop = min((w.pc for w in live if w.pc > lo), default=-1)
        if len(members) > 1 and members[-1].index - members[0].index == len(members) - 1:
            cohort = group.cohort(members)
            _run_cohort(program, handlers, lock[cohort.n], cohort, counts, stop, max_steps)
        else:
            for w in members:
                _step(program, handlers, w, counts, max_steps, max_steps, stop)


def _uniform(waves: list[Wave], sgprs: tuple[int, ...]) -> bool:
    """Whether every wave holds the first one's values in `sgprs`."""
    s0 = waves[0].s
    for w in waves[1:]:
        s = w.s
        for r in sgprs:
            if s[r] != s0[r]:
                return False
    return True


def _run_cohort(program: Program, handlers: list[Handler], lock: LockstepCode, cohort: Cohort,
                counts: defaultdict[int, int], stop: int, max_steps: int) -> None:
    """Run the cohort's waves together from their common PC until they part, block or end, or
    reach `stop`, each instruction as `Program.cohort_plan` says: lane-wise ones once on the
    cohort, scalar ones once on the first wave (results copied), both when the waves agree on
    what the instruction reads; anything else on each wave in order."""
    members = cohort.members
    first = members[0]
    rest = members[1:]
    k = len(members)
    plan_of = program.cohort_plan
    lhandlers = lock.handlers
    i = first.pc
    n = 0
    budget = max_steps - max(w.steps for w in members)
    synced = True                # members' own pc fields are up to date
    stale_exec = True
    w = first
    try:
        while i != stop and n < budget:
            plan = plan_of(i)
            if plan is not None:
                kind = plan[0]
                if kind == LANEWISE:
                    if not plan[1] or _uniform(members, plan[1]):
                        if stale_exec:
                            cohort.refresh()
                            stale_exec = False
                        h = lhandlers[i] or lock.handler(i)
                        try:
                            h(cohort)
                        except Exception as e:
                            _replay(program, handlers, members, i, e)
                        counts[i] += k
                        n += 1
                        i += 1
                        synced = False
                        continue
                elif kind == NOOP:
                    counts[i] += k
                    n += 1
                    i += 1
                    synced = False
                    continue
                elif _scalar_uniform(first, rest, plan[1]):
                    w = first
                    first.pc = i + 1
                    handlers[i](first)
                    _copy_scalar(first, rest, plan[2])
                    counts[i] += k
                    n += 1
                    stale_exec = True
                    i = first.pc
                    synced = True
                    if first.state != RUNNING:
                        return
                    continue
            for w in members:
                w.pc = i + 1
                handlers[i](w)
            counts[i] += k
            n += 1
            stale_exec = True
            i = first.pc
            synced = True
            for w in members:
                if w.pc != i or w.state != RUNNING:
                    return
    except EmulatorFault as e:
        raise _located(program, handlers, w, i, e) from None
    except EmulatorError:
        raise
    except Exception as e:
        raise _located(program, handlers, w, i, e) from None
    finally:
        if not synced:
            for w in members:
                w.pc = i
        for w in members:
            w.steps += n
    _check_runaway(program, first, max_steps)


def _scalar_uniform(first: Wave, rest: list[Wave], sgprs: tuple[int, ...]) -> bool:
    """Whether the waves agree on SCC, EXEC and `sgprs`."""
    s0, scc, exec_ = first.s, first.scc, first.exec
    for w in rest:
        if w.scc != scc or w.exec != exec_:
            return False
        s = w.s
        for r in sgprs:
            if s[r] != s0[r]:
                return False
    return True


def _copy_scalar(first: Wave, rest: list[Wave], sgprs: tuple[int, ...]) -> None:
    """Give `rest` the scalar results `first` computed: `sgprs`, SCC, EXEC, PC and status."""
    s0 = first.s
    for w in rest:
        s = w.s
        for r in sgprs:
            s[r] = s0[r]
        w.scc = first.scc
        if w.exec != first.exec:
            w.set_exec(first.exec)
        w.pc = first.pc
        w.state = first.state


def _replay(program: Program, handlers: list[Handler], members: list[Wave], i: int, error: Exception) -> None:
    """A lane-wise instruction failed on the cohort: run it wave by wave, so a fault names the wave
    and lane it belongs to. If every wave then succeeds, the lockstep path itself is wrong."""
    for w in members:
        try:
            w.pc = i + 1
            handlers[i](w)
        except EmulatorFault as e:
            raise _located(program, handlers, w, i, e) from None
        except EmulatorError:
            raise
        except Exception as e:
            raise _located(program, handlers, w, i, e) from None
    raise EmulatorError(f"emulator bug: lockstep execution of {program.insts[i].text!r} at "
                        f"{program.where(program.insts[i].addr)} failed where wave-by-wave execution did not: "
                        f"{error!r}") from error


def _located(program: Program, handlers: list[Handler], w: Wave, i: int, e: Exception) -> Exception:
    """An exception of instruction `i` on wave `w`, said where it happened."""
    if isinstance(e, EmulatorFault):
        return EmulatorFault(f"{program.where(program.insts[i].addr)} ({program.arch.name}, wave {w.index} of "
                             f"workgroup {w.group.id}): {e}")
    if isinstance(e, IndexError):
        if i >= len(handlers):
            return EmulatorError(f"wave ran past the end of the code ({program.where(program.insts[-1].addr)})")
        return EmulatorError(f"emulator bug at {program.where(program.insts[i].addr)}: {e!r}")
    return EmulatorError(f"emulator failure at {program.where(program.insts[i].addr)} "
                         f"({program.insts[i].text!r}): {e!r}")


def _check_runaway(program: Program, w: Wave, max_steps: int) -> None:
    if w.steps >= max_steps:
        raise EmulatorError(f"runaway wave: {w.steps} instructions without finishing "
                            f"({program.where(program.insts[w.pc].addr)}, {program.arch.name}); "
                            "raise max_wave_steps if the kernel really needs more")


def _step(program: Program, handlers: list[Handler], w: Wave, counts: defaultdict[int, int], budget: int,
          max_steps: int, stop: int = -1) -> None:
    """Run `w` until it blocks, ends, has executed `budget` instructions, or reaches PC `stop`."""
    running = RUNNING
    n = 0
    i = w.pc
    try:
        while w.state == running and n < budget:
            i = w.pc
            if i == stop:
                break
            w.pc = i + 1
            handlers[i](w)
            counts[i] += 1
            n += 1
    except EmulatorFault as e:
        raise _located(program, handlers, w, i, e) from None
    except EmulatorError:
        raise
    except Exception as e:
        raise _located(program, handlers, w, i, e) from None
    w.steps += n
    _check_runaway(program, w, max_steps)
