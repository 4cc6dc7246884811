"""Running one kernel launch: dispatch state exactly as hardware + HIP set it up,
then the workgroups and their waves.

Deterministic by default, in lockstep: workgroups run side by side in batches of up to
`LOCKSTEP_LANES` lanes, and the waves standing at the same instruction form a `Cohort`
that executes it as one (see `_run_cohort` and `Program.cohort_plan`: lane-wise work as
one numpy operation over all their lanes, scalar work once per workgroup, the rest wave
by wave in order). Waves whose PCs part run separately, the lowest PC first, until they
meet again. For a race-free kernel the results are those of running the waves one after
another (``lockstep=False``, kept to compare against).

With a seed, workgroups run in a shuffled order and the scheduler lets waves run ahead of
each other by random numbers of instructions, so a missing barrier or a race changes the
result (`_run_seeded`): in each round a random set of wave indices runs ahead by 1..64
instructions in every workgroup of the batch, then the other waves follow as far, stopping
where they meet one that ran ahead; waves at one PC run in lockstep. Every workgroup thus sees
a random interleaving of its own waves; ``lockstep=False`` with a seed runs one workgroup at a
time, one wave at a time (the schedule before batches, with its own random sequence).
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..codeobject import Kernel
from ..errors import EmulatorError, EmulatorFault
from .descriptor import descriptor_of
from .memory import Memory, blocks
from .ops import Handler
from .program import LANEWISE, NOOP, LockstepCode, Program
from .state import AT_BARRIER, NUM_SREGS, RUNNING, TTMP0, Cohort, GatheredCohort, Wave
from .stats import LaunchStats

DEFAULT_MAX_WAVE_STEPS = 20_000_000


# How many lanes of whole workgroups run side by side in lockstep: enough that numpy's work per
# instruction outweighs the Python around it, small enough that arrays stay in cache.
LOCKSTEP_LANES = 2048


class Batch:
    """Workgroups run side by side: one register file with every wave's lanes next to each
    other (any run of consecutive waves is one view, a `Cohort`), and one LDS buffer holding
    each workgroup's LDS at a fixed stride."""

    def __init__(self, count: int, nwaves: int, wave_size: int, gfx9: bool, lds_bytes: int, strict_lds: bool,
                 mem: Memory, stats: LaunchStats, vgprs: int = 256, agprs: int = 256) -> None:
        lanes = count * nwaves * wave_size
        # Slots: a workgroup's waves next to each other, the workgroups one after another.
        self.vgprs, self.agprs = min(vgprs, 256), min(agprs, 256)     # register rows the kernel uses
        self.wave_size = wave_size
        self.vfile = np.zeros((256, lanes), np.uint32)
        self.afile = np.zeros((256, lanes), np.uint32) if gfx9 else None
        self.sfile = np.zeros((count * nwaves, NUM_SREGS), np.uint32)
        self.lds_stride = -(-max(lds_bytes, 4) // 4) * 4
        self.lds = np.zeros(count * self.lds_stride, np.uint8)
        self.lds_size = lds_bytes
        self.lds_written = np.zeros(len(self.lds), bool) if strict_lds else None
        self.mem = mem
        self.stats = stats
        self.groups: list[Workgroup] = []
        self.waves: list[Wave] = []            # in slot order
        self._cohorts: dict[tuple[int, int], Cohort] = {}
        self._gathered: dict[tuple[int, ...], GatheredCohort] = {}
        # the gathered cohorts' register copy: one runs at a time, each loads it when it starts
        self._gather_v = np.zeros_like(self.vfile)
        self._gather_a = None if self.afile is None else np.zeros_like(self.afile)
        self._lds_windows: dict[int, np.ndarray] = {}

    def cohort(self, waves: list[Wave]) -> Cohort:
        """The cohort of `waves` (in slot order; of one workgroup or several): a view of the batch's
        registers when they are consecutive, else a gathered copy of the rows the kernel uses. Both
        are kept for the batch (divergent split-K waves form the same few sets again and again)."""
        if waves[-1].slot - waves[0].slot != len(waves) - 1:
            key = tuple(w.slot for w in waves)
            gathered = self._gathered.get(key)
            if gathered is not None:
                gathered.reload()
                return gathered
            n = self.wave_size
            runs: list[list[int]] = []
            for w in waves:
                if runs and runs[-1][1] == w.slot * n:
                    runs[-1][1] += n
                else:
                    runs.append([w.slot * n, (w.slot + 1) * n])
            group = waves[0].group if waves[0].group is waves[-1].group else _Span(self, waves)
            lanes = slice(0, len(waves) * n)
            gathered = self._gathered[key] = GatheredCohort(
                waves, self.vfile, self.afile, group, runs, self.vgprs, self.agprs, self._gather_v[:, lanes],
                None if self._gather_a is None else self._gather_a[:, lanes])
            return gathered
        key = (waves[0].slot, len(waves))
        found = self._cohorts.get(key)
        if found is None:
            n = self.wave_size
            lanes = slice(waves[0].slot * n, (waves[-1].slot + 1) * n)
            group = waves[0].group if waves[0].group is waves[-1].group else _Span(self, waves)
            found = self._cohorts[key] = Cohort(waves, self.vfile[:, lanes],
                                                None if self.afile is None else self.afile[:, lanes], group)
        return found

    def lds_window(self, size: int) -> np.ndarray:
        return _window(self._lds_windows, self.lds, size)

    def lds_blocks(self, size: int) -> np.ndarray:
        return _blocks(self._lds_windows, self.lds, size)


def _window(cache: dict[int, np.ndarray], lds: np.ndarray, size: int) -> np.ndarray:
    """A view of `lds` whose row k is bytes k..k+size-1 (one row per lane access)."""
    w = cache.get(size)
    if w is None:
        w = cache[size] = as_strided(lds, (max(len(lds) - size + 1, 0), size), (1, 1))
    return w


def _blocks(cache: dict[int, np.ndarray], lds: np.ndarray, size: int) -> np.ndarray:
    """`lds` as rows of `size` bytes (for accesses at multiples of `size`, `memory.aligned`)."""
    b = cache.get(-size)
    if b is None:
        b = cache[-size] = blocks(lds, size)
    return b


class Workgroup:
    """One workgroup: its id, its waves, and its LDS (a slice of its batch's)."""

    lane_base = None                     # LDS rows are this workgroup's own

    def __init__(self, gid: tuple[int, int, int], batch: Batch, index: int) -> None:
        self.id = gid
        self.batch = batch
        self.index = index                   # in the batch
        stride = batch.lds_stride
        self.lds = batch.lds[index * stride:(index + 1) * stride]
        self.lds_size = batch.lds_size
        self.lds_written = None if batch.lds_written is None else batch.lds_written[index * stride:(index + 1) * stride]
        self.mem = batch.mem
        self.stats = batch.stats
        self.waves: list[Wave] = []
        self._lds_windows: dict[int, np.ndarray] = {}

    def new_wave(self, index: int, gfx9: bool) -> Wave:
        b = self.batch
        slot = len(b.waves)
        n = b.wave_size
        lanes = slice(slot * n, (slot + 1) * n)
        w = Wave(n, gfx9, self, index, s=b.sfile[slot], v=b.vfile[:, lanes],
                 a=None if b.afile is None else b.afile[:, lanes])
        w.slot = slot
        b.waves.append(w)
        self.waves.append(w)
        return w

    def lds_window(self, size: int) -> np.ndarray:
        return _window(self._lds_windows, self.lds, size)

    def lds_blocks(self, size: int) -> np.ndarray:
        return _blocks(self._lds_windows, self.lds, size)


class _Span:
    """What lane-wise LDS and memory instructions see as the workgroup of a cohort that spans
    several: the batch's LDS, with each lane's accesses offset to its own workgroup's slice
    (`lane_base`, added after the bounds check against one workgroup's size)."""

    def __init__(self, batch: Batch, waves: list[Wave]) -> None:
        self.id = tuple(dict.fromkeys(w.group.id for w in waves))
        self.lds = batch.lds
        self.lds_size = batch.lds_size
        self.lds_written = batch.lds_written
        self.mem = batch.mem
        self.stats = batch.stats
        bases = [w.group.index * batch.lds_stride for w in waves]     # where each one's LDS slice starts
        self.lane_base = np.repeat(np.array(bases, np.int64), batch.wave_size)
        self._batch = batch

    def lds_window(self, size: int) -> np.ndarray:
        return self._batch.lds_window(size)

    def lds_blocks(self, size: int) -> np.ndarray:
        return self._batch.lds_blocks(size)


def run_launch(program: Program, kernel: Kernel, mem: Memory, grid: tuple[int, int, int],
               block: tuple[int, int, int], kernarg_addr: int, packet_addr: int, queue_addr: int,
               dynamic_lds: int, seed: int | None = None, strict_lds: bool = False,
               max_wave_steps: int = DEFAULT_MAX_WAVE_STEPS, lockstep: bool = True) -> LaunchStats:
    """`lockstep=False` runs each wave alone between barriers (the emulator before cohorts; kept
    to compare against). A seeded run schedules single waves, one workgroup at a time."""
    kd = descriptor_of(kernel, program.arch.name)
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
    side_by_side = max(1, LOCKSTEP_LANES // (nwaves * wave_size)) if lockstep else 1
    lock = program.lockstep_code(kernel) if lockstep else None
    start = time.perf_counter()
    with np.errstate(all="ignore"):      # IEEE results (inf, NaN) are the kernel's, not warnings
        for first in range(0, len(order), side_by_side):
            gids = order[first:first + side_by_side]
            batch = Batch(len(gids), nwaves, wave_size, gfx9, lds_bytes, strict_lds, mem, stats,
                          kernel.vgpr_count, kernel.agpr_count)
            for j, gid in enumerate(gids):
                batch.groups.append(_start_group(program, kernel, batch, j, gid, nwaves, packed, user, entry))
            if lock is None:
                for group in batch.groups:
                    _run_group(program, handlers, group, counts, rng, max_wave_steps)
            elif rng is not None:
                _run_seeded(program, handlers, lock, batch, counts, rng, max_wave_steps)
            else:
                _run_lockstep(program, handlers, lock, batch, counts, max_wave_steps)
            stats.workgroups += len(gids)
            stats.waves += nwaves * len(gids)
    stats.seconds = time.perf_counter() - start
    classes = Counter()
    mnemonics = Counter()
    addrs, ran = [], []
    from .ops import CLASSES
    for i, c in counts.items():
        if c:
            classes[CLASSES[program.class_of(i)]] += c
            mnemonics[program.insts[i].mnemonic] += c
            addrs.append(program.insts.addrs[i])
            ran.append(c)
    stats.instructions = classes
    stats.mnemonics = mnemonics
    stats.profile = (np.array(addrs, np.int64), np.array(ran, np.int64))
    return stats


def _start_group(program: Program, kernel: Kernel, batch: Batch, j: int, gid: tuple[int, int, int], nwaves: int,
                 packed: np.ndarray, user: dict[str, int], entry: int) -> Workgroup:
    """Workgroup `gid` with its waves in their dispatch state (SGPRs, v0, EXEC, PC)."""
    kd = descriptor_of(kernel, program.arch.name)
    wave_size = batch.wave_size
    gfx9 = program.ctx.gfx == 9
    group = Workgroup(gid, batch, j)
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
    return group


def _run_group(program: Program, handlers: list[Handler], group: Workgroup, counts: defaultdict[int, int],
               rng: random.Random | None, max_steps: int) -> None:
    """One workgroup, one wave at a time: each in order until it blocks (lockstep off), or a
    random wave for a random number of instructions (seeded)."""
    waves = group.waves
    while True:
        runnable = [w for w in waves if w.state == RUNNING]
        if not runnable:
            if not _release_barrier(group):
                return
            continue
        if rng is not None:
            w = rng.choice(runnable)
            _step(program, handlers, w, counts, rng.randint(1, 64), max_steps)
        else:
            for w in runnable:
                _step(program, handlers, w, counts, max_steps, max_steps)


def _run_lockstep(program: Program, handlers: list[Handler], lock: LockstepCode, batch: Batch,
                  counts: defaultdict[int, int], max_steps: int) -> None:
    """Run the batch's workgroups to the end: every wave as far as it goes (`_advance`: the waves
    at the lowest PC first, as one cohort, merging with the others where they meet); when every
    wave is blocked, each workgroup's barrier releases (all its live waves wait at it then)."""
    waves = batch.waves
    while True:
        _advance(program, handlers, lock, batch, waves, max_steps, frozenset(), counts, max_steps)
        for group in batch.groups:
            _release_barrier(group)
        if not any(w.state == RUNNING for w in waves):
            return


def _release_barrier(group: Workgroup) -> bool:
    """Release the barrier of a workgroup none of whose waves can run (every live wave has
    arrived at it); False if no wave waits there (they have all ended)."""
    waiting = [w for w in group.waves if w.state == AT_BARRIER]
    for w in waiting:
        w.state = RUNNING
    if waiting:
        group.stats.barriers += 1
    return bool(waiting)


def _run_seeded(program: Program, handlers: list[Handler], lock: LockstepCode, batch: Batch,
                counts: defaultdict[int, int], rng: random.Random, max_steps: int) -> None:
    """Run the batch's workgroups to the end on one random schedule, a sequence of rounds:

    - a random set of wave indices (each with probability 1/2, at least one) and a count 1..64
      are drawn; those waves of every workgroup run ahead by that many instructions;
    - then the other waves run as many, stopping early where they reach a PC at which a wave
      that ran ahead stands (so waves meet again and later rounds run as larger cohorts).

    A wave that runs ahead of the others of its workgroup sees their stores late, so a missing
    barrier shows. A workgroup's barrier releases as soon as none of its waves can run."""
    groups, waves = batch.groups, batch.waves
    while True:
        for group in groups:
            if not any(w.state == RUNNING for w in group.waves):
                _release_barrier(group)
        indices = sorted({w.index for w in waves if w.state == RUNNING})
        if not indices:
            return
        ahead = {j for j in indices if rng.random() < 0.5} or {rng.choice(indices)}
        count = rng.randint(1, 64)
        leaders = [w for w in waves if w.state == RUNNING and w.index in ahead]
        _advance(program, handlers, lock, batch, leaders, count, frozenset(), counts, max_steps)
        meet = frozenset(w.pc for w in leaders if w.state == RUNNING)
        rest = [w for w in waves if w.state == RUNNING and w.index not in ahead]
        _advance(program, handlers, lock, batch, rest, count, meet, counts, max_steps)


def _advance(program: Program, handlers: list[Handler], lock: LockstepCode, batch: Batch, members: list[Wave],
             count: int, meet: frozenset[int], counts: defaultdict[int, int], max_steps: int) -> None:
    """Run each of `members` (in slot order) for `count` instructions, or until it blocks, ends or
    stands at a PC in `meet`. The waves at the lowest PC go first, as one cohort, and stop where
    they reach another member's PC, so members that parted merge again."""
    goal = {id(w): w.steps + count for w in members}
    while True:
        live = [w for w in members if w.state == RUNNING and w.steps < goal[id(w)] and w.pc not in meet]
        if not live:
            return
        lo = min(w.pc for w in live)
        together = [w for w in live if w.pc == lo]
        stop = min([w.pc for w in live if w.pc > lo] + [pc for pc in meet if pc > lo], default=-1)
        left = min(goal[id(w)] - w.steps for w in together)
        if len(together) > 1:
            cohort = batch.cohort(together)
            _run_cohort(program, handlers, lock, cohort, counts, stop, max_steps, left)
        else:
            _step(program, handlers, together[0], counts, left, max_steps, stop)


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
                counts: defaultdict[int, int], stop: int, max_steps: int, limit: int | None = None) -> None:
    """Run the cohort's waves together from their common PC until they part, block or end, reach
    `stop`, or have executed `limit` instructions, each instruction as `Program.cohort_plan` says:
    lane-wise ones once on the cohort, scalar ones once on the first wave (results copied), both
    when the waves agree on what the instruction reads; anything else on each wave in order."""
    members = cohort.members
    first = members[0]
    k = len(members)
    plan_of = program.cohort_plan
    lhandlers = lock.handlers
    i = first.pc
    n = 0
    budget = max_steps - max(w.steps for w in members)
    if limit is not None and limit < budget:
        budget = limit
    waiter = first.group.mem.waiter
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
                            cohort.finish()
                            _replay(program, handlers, members, i, e)
                        counts[i] += k
                        n += 1
                        i += 1
                        synced = False
                        continue
                    # the members differ in the SGPRs it reads: once per run of members that agree
                    h = lhandlers[i] or lock.handler(i)
                    for at, count in _agreeing_runs(members, plan[1]):
                        part = cohort.part(at, count)
                        part.refresh()
                        try:
                            h(part)
                        except Exception as e:
                            cohort.finish()
                            _replay(program, handlers, part.members, i, e)
                    counts[i] += k
                    n += 1
                    i += 1
                    synced = False
                    continue
                elif kind == NOOP:
                    if len(plan) > 1 and waiter is not None:
                        waiter(cohort, plan[1])
                    counts[i] += k
                    n += 1
                    i += 1
                    synced = False
                    continue
            if plan is not None and plan[0] != LANEWISE:
                # scalar: once for the whole cohort when every member agrees on the inputs (loop
                # counters, bounds), else once per workgroup whose waves agree, else on each wave
                subs = cohort.subgroups
                if len(subs) > 1 and _scalar_uniform(first, members[1:], plan[1]):
                    subs = [members]
                for sub in subs:
                    w = sub[0]
                    if _scalar_uniform(w, sub[1:], plan[1]):
                        w.pc = i + 1
                        handlers[i](w)
                        _copy_scalar(w, sub[1:], plan[2])
                    else:
                        for w in sub:
                            w.pc = i + 1
                            handlers[i](w)
            else:
                h = handlers[i]
                cohort.finish()                      # the members' own vector registers, up to date
                for w in members:
                    w.pc = i + 1
                    h(w)
                cohort.reload()
            counts[i] += k
            n += 1
            stale_exec = True
            i = first.pc
            synced = True
            for w in members:
                if w.pc != i or w.state != RUNNING:
                    return
    except Exception as e:
        raise _located(program, handlers, w, i, e) from None
    finally:
        cohort.finish()
        if not synced:
            for w in members:
                w.pc = i
        for w in members:
            w.steps += n
    _check_runaway(program, first, max_steps)



def _agreeing_runs(members: list[Wave], sgprs: tuple[int, ...]) -> list[tuple[int, int]]:
    """(first, count) of each maximal run of consecutive members of one workgroup that hold the
    same values in `sgprs`."""
    runs, start, head = [], 0, members[0]
    for j in range(1, len(members)):
        w = members[j]
        if w.group is not head.group or any(w.s[r] != head.s[r] for r in sgprs):
            runs.append((start, j - start))
            start, head = j, w
    runs.append((start, len(members) - start))
    return runs


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
        except Exception as e:
            raise _located(program, handlers, w, i, e) from None
    raise EmulatorError(f"emulator bug: lockstep execution of {program.insts[i].text!r} at "
                        f"{program.where(program.insts[i].addr)} failed where wave-by-wave execution did not: "
                        f"{error!r}") from error


def _located(program: Program, handlers: list[Handler], w: Wave, i: int, e: Exception) -> Exception:
    """An exception of instruction `i` on wave `w`, said where it happened (an EmulatorError other
    than a fault already says so)."""
    if isinstance(e, EmulatorError) and not isinstance(e, EmulatorFault):
        return e
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
    except Exception as e:
        raise _located(program, handlers, w, i, e) from None
    w.steps += n
    _check_runaway(program, w, max_steps)
