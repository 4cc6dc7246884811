"""Dynamic numbers from the emulator: what a launch at a real shape moves and issues.

Real shapes are too big to emulate whole on a CPU (~10^5 wave-instructions/s), so each
runs on a *scaled-down GPU* of the same arch: c CUs instead of the flagship's C (both the
device's CU count and the `ArchInfo.default_cu_count` it reports, which some plans use),
and M' ~ M * c / C weight rows, same N and K. The ops' plans depend on M only through
M / CU count, so the sample runs the same kernel and configuration with the same work per
wave as the real launch. `choose_sample` checks that through the op's `plan_info`: every
entry must be equal (configuration) or scale by M / M' (grid, work units, scratch bytes)
within 0.1%; the first c from the one giving MIN_ROWS rows (up to 8x it) that passes is
used, with M' = M * c / C rounded to a multiple of 128, 64, ..., 1 rows (the coarsest
that passes, so kernels working on row blocks see the same tails). Counts are scaled by
M / M'. When no c passes, the closest one within 2% is used (its error is reported);
else the whole GPU is emulated if under EMULATION_BUDGET, and otherwise the shape is
reported as skipped. A sample over ROW_CAP_ELEMENTS weight elements (the lm_heads, and
more on the RDNA parts, whose few CUs leave thousands of rows per CU even at c = 1) is not
run whole when two runs on the same c-CU grid with R and R/2 rows (R the most 256-row
blocks under the cap, at least 256) halve the work: they fit every count as a fixed part
plus a part per row, evaluated at M'. The linearity check repeats one unfitted, mid-sized
sample per (code-object family, arch) at 2c. The ops are called through the public API,
so kernels a family adds are measured unchanged.
"""

from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import hipskinny
from hipskinny import operands
from hipskinny.arch import ARCHS, ArchInfo
from hipskinny.devices.base import Device, DeviceProperties
from hipskinny.emulator import EmulatedDevice, LaunchStats
from hipskinny.errors import HipSkinnyError, InputValueError

from . import cache, families, latency, traffic

MIN_ROWS = 64
SAMPLE_TOL = 0.02                 # largest accepted deviation of a sample from a scaled real launch
EMULATION_BUDGET = 1 << 27        # weight elements x N of a whole-GPU fallback run (~minutes)
ROW_CAP_ELEMENTS = 1 << 20        # fit two shorter runs (>= 2x less work) above this many sample weights


class ScaledDevice(EmulatedDevice):
    """An emulated GPU whose CU count can be changed between launches, so the code object is
    decoded once per arch rather than once per sample (plans are cached per CU count; the ops'
    bound calls, which a real device's fixed CU count lets skip planning, are dropped when it
    changes)."""

    def __init__(self, arch: str) -> None:
        super().__init__(arch)
        self._cus = ARCHS[arch].default_cu_count

    @property
    def cus(self) -> int:
        return self._cus

    @cus.setter
    def cus(self, value: int) -> None:
        if value != self._cus:
            operands.forget_bound_calls(self)
        self._cus = value

    @property
    def properties(self) -> DeviceProperties:
        return replace(super().properties, cu_count=self.cus)

    @property
    def arch(self) -> ArchInfo:
        # A smaller product of the same arch (the same bandwidth per CU): plans sized by the
        # flagship's CU count or bandwidth scale too.
        full = ARCHS[self.properties.gcn_arch_name]
        return replace(full, default_cu_count=self.cus,
                       peak_bandwidth_gbs=full.peak_bandwidth_gbs * self.cus / full.default_cu_count)


_devices: dict[str, ScaledDevice] = {}


def device(arch: str, cus: int) -> ScaledDevice:
    dev = _devices.get(arch)
    if dev is None:
        dev = _devices[arch] = ScaledDevice(arch)
    dev.cus = cus
    return dev


def ops() -> list[str]:
    """The ops the report's GEMM model measures (their `Exports.report`), each followed by its report
    variants ("op:variant", registered in `benchmarks.families`: other modes of one op)."""
    import hipskinny.ops as pkg

    names = [op for op in pkg.op_names() if pkg.exports(op).report == pkg.GEMM_REPORT]
    return [v for nm in names for v in (nm, *(f"{nm}:{x}" for x in families.family(nm).variants))]


def split_op(op: str) -> tuple[str, str | None]:
    """("fp8_linear", "w8a8") for "fp8_linear:w8a8"; (op, None) for a plain op."""
    name, _, variant = op.partition(":")
    return name, variant or None


def op_function(op: str) -> Any:
    return getattr(hipskinny, split_op(op)[0])


def kernel_family(kernel: str, families: list[str]) -> str | None:
    """The code-object family a kernel belongs to: the longest family name that prefixes it."""
    found = [f for f in families if kernel == f or kernel.startswith(f + "_")]
    return max(found, key=len) if found else None


def op_module(op: str) -> Any:
    return importlib.import_module(f"hipskinny.ops.{split_op(op)[0]}")


def call_args(op: str, x: np.ndarray, w: np.ndarray, arch: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The op's arguments for activations x [N, K] and weights w [M, K] of the report's dtype: its
    family's ``operands(x, w)`` when it has one (ops whose weights are not 16-bit; a variant's with
    ``variant=`` and ``arch=``), else (x, w) (x[0] for gemv)."""
    variant = split_op(op)[1]
    hook = families.family(op).operands
    if hook is not None:
        return hook(x, w, variant=variant, arch=arch) if variant else hook(x, w)
    return (x[0] if op == "gemv" else x, w), {}


def min_bytes(op: str, n: int, m: int, k: int, itemsize: int) -> tuple[float, float]:
    """(least bytes a launch must move, weight bytes): its family's ``min_bytes`` when it has one,
    else every operand once in the report's dtype."""
    variant = split_op(op)[1]
    hook = families.family(op).min_bytes
    if hook is not None:
        return hook(n, m, k, itemsize, variant=variant) if variant else hook(n, m, k, itemsize)
    return itemsize * (m * k + n * k + n * m), itemsize * m * k


def plan_info(op: str, device: Device, dtype: Any, n: int, m: int, k: int) -> dict[str, Any]:
    """The op's ``plan_info`` (a variant's: its family's ``plan_info(..., variant=)``; gemv predates
    it: its plan is read the same way here)."""
    module = op_module(op)
    variant = split_op(op)[1]
    if variant:
        hook = families.family(op).plan_info
        assert hook is not None, op
        return dict(hook(device, dtype, n, m, k, variant=variant))
    if hasattr(module, "plan_info"):
        return dict(module.plan_info(device, dtype, n, m, k))
    if op == "gemv":
        if n != 1:
            raise InputValueError("gemv: supported N = 1 (one token)")
        from hipskinny.ops._common import DTYPE_TAG

        plan = module._plan(device, DTYPE_TAG[np.dtype(dtype)], m, k, -(-k // 8) * 8)
        return {**plan.info, "grid": plan.grid[0]}
    raise HipSkinnyError(f"ops/{op}.py has no plan_info(device, dtype, n, m, k); the report cannot plan it")


def unsupported_reason(op: str, arch: str, dtype: Any, n: int, k: int) -> str | None:
    """The op's own message when it rejects N (asked with a one-row problem), else None."""
    dev = device(arch, 1)
    x = np.zeros((n, k), dtype)
    w = np.zeros((1, k), dtype)
    try:
        args, kwargs = call_args(op, x, w, arch)
        with hipskinny.on_device(dev):
            op_function(op)(*args, **kwargs)
    except InputValueError as e:
        return str(e)
    except Exception:            # noqa: BLE001 - anything else: plan_info's error stands
        return None
    return None


@dataclass
class Sample:
    cus: int
    rows: int
    stats: LaunchStats
    info: dict[str, Any]
    last: Counter | None = None     # a call of several launches: the last one's mnemonics (its listing's)
    dram: float = 0.0               # bytes the call's launches read from and write to DRAM (benchmarks/cache.py)
    dram_shared: float = 0.0        # the part of dram that moved shared lines: not scaled by M / M' (cache.py)
    waits: list[latency.Waits] = field(default_factory=list)    # per launch

    @property
    def per_row(self) -> dict[str, float]:
        s = self.stats
        return {"bytes": (s.bytes_loaded["global"] + s.bytes_stored["global"]) / self.rows,
                "valu": (s.instructions["valu"] + s.instructions["trans"]) / self.rows,
                "lds_bytes": (s.bytes_loaded["lds"] + s.bytes_stored["lds"]) / self.rows,
                "matrix": s.instructions["matrix"] / self.rows}


@dataclass
class Measurement:
    op: str
    arch: str
    n: int
    m: int
    k: int
    status: str                              # "ok", "unsupported", "skipped", "error"
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    sample: Sample | None = None
    scale: float = 1.0
    check: Sample | None = None              # the 2c linearity sample, when run
    plan_error: float = 0.0                  # sample's plan vs the real one scaled down (see mismatch)
    fitted: tuple[int, int] | None = None    # rows of the two runs the sample was fitted from

    def dram(self) -> float:
        """DRAM bytes of the real shape: the sample's times M / M', but the traffic of its shared lines
        (x: the flagship moves it as often as the sample, benchmarks/cache.py) as it is."""
        assert self.sample is not None
        s = self.sample
        return (s.dram - s.dram_shared) * self.scale + s.dram_shared

    def scaled(self) -> dict[str, Any]:
        """Counts for the real shape: the sample's times M / M'."""
        assert self.sample is not None
        s, f = self.sample.stats, self.scale
        return {"bytes_loaded": s.bytes_loaded["global"] * f, "bytes_stored": s.bytes_stored["global"] * f,
                "lds_bytes": (s.bytes_loaded["lds"] + s.bytes_stored["lds"]) * f,
                "instructions": {c: v * f for c, v in s.instructions.items()},
                "mnemonics": Counter({c: v * f for c, v in s.mnemonics.items()})}

    def linearity(self) -> float | None:
        """Largest relative difference of per-row counts between the c and 2c samples."""
        if self.check is None or self.sample is None:
            return None
        a, b = self.sample.per_row, self.check.per_row
        return max((abs(a[key] / b[key] - 1) for key in a if b[key]), default=0.0)


def _fit(s1: Sample, s2: Sample, rows: int, info: dict[str, Any]) -> Sample:
    """The sample at `rows` rows from two runs on the same grid with fewer rows: every count is
    a fixed per-launch part (per workgroup and wave) plus a part per row, fitted exactly."""
    out = LaunchStats(kernel=s2.stats.kernel, arch=s2.stats.arch)

    def line(a: float, b: float) -> float:
        per_row = (b - a) / (s2.rows - s1.rows)
        return a + per_row * (rows - s1.rows)

    for name in ("instructions", "mnemonics", "bytes_loaded", "bytes_stored"):
        c1, c2 = getattr(s1.stats, name), getattr(s2.stats, name)
        setattr(out, name, Counter({key: line(c1[key], c2[key]) for key in c1.keys() | c2.keys()}))
    out.workgroups, out.waves = s2.stats.workgroups, s2.stats.waves
    out.seconds = s1.stats.seconds + s2.stats.seconds
    # A round trip's latency is an average over where the lines were served, not a count: the
    # longer run's (extrapolated, it left the levels' range: -293 ns for matmul_4bit lm_head N = 64).
    waits = [latency.Waits(b.kernel, latency.Trips(line(a.trips.longest, b.trips.longest),
                                                   line(a.trips.total, b.trips.total), b.trips.waves),
                           b.round_trip_ns)
             for a, b in zip(s1.waits, s2.waits, strict=True)]
    return Sample(s2.cus, rows, out, info, s2.last, dram=line(s1.dram, s2.dram), waits=waits,
                  dram_shared=line(s1.dram_shared, s2.dram_shared))


def _emulate(op: str, arch: str, cus: int, dtype: Any, n: int, rows: int, k: int, seed: int) -> Sample:
    dev = device(arch, cus)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)).astype(dtype)
    w = rng.standard_normal((rows, k)).astype(dtype)
    args, kwargs = call_args(op, x, w, arch)
    dev.launches.clear()                  # a bounded history: this call's launches only
    # the activation (every op's first argument) and its x_ keywords (x_scale): the shared lines
    activation = tuple(a for a in (args[0], *(v for key, v in kwargs.items() if key.startswith("x_")))
                       if isinstance(a, np.ndarray))
    with hipskinny.on_device(dev), traffic.Recorder(dev, table=False, shared=activation) as rec:
        op_function(op)(*args, **kwargs)
        info = plan_info(op, dev, dtype, n, rows, k)
    launches = list(dev.launches)
    assert launches
    # the plan's workgroups per CU resident, else cache.PER_CU (a route's dequantize step)
    per_cu = int(info.get("groups_per_cu", cache.PER_CU))
    caches, waits = zip(*(rec.costs(i, st, arch, cus, per_cu) for i, st in enumerate(launches)), strict=True)
    dram = float(sum(c.dram_bytes for c in caches))
    shared = float(sum(c.shared_bytes for c in caches))
    if len(launches) == 1:
        return Sample(cus, rows, launches[0], info, dram=dram, waits=list(waits), dram_shared=shared)
    return Sample(cus, rows, combined(launches), info, Counter(launches[-1].mnemonics), dram=dram,
                  waits=list(waits), dram_shared=shared)


def combined(launches: list[LaunchStats]) -> LaunchStats:
    """The launches of one call (a route of two kernels) as one: counts summed, named by the last
    (the kernel whose plan the call's plan_info describes). The prediction on the sums is a lower
    bound of the launches' sequential time (each launch's own roof can differ)."""
    out = LaunchStats(kernel=launches[-1].kernel, arch=launches[-1].arch)
    for s in launches:
        for name in ("instructions", "mnemonics", "bytes_loaded", "bytes_stored"):
            getattr(out, name).update(getattr(s, name))
        out.workgroups += s.workgroups
        out.waves += s.waves
        out.barriers += s.barriers
        out.seconds += s.seconds
    return out


def mismatch(real: dict[str, Any], small: dict[str, Any], factor: float) -> float:
    """How far a sample's plan is from the real one scaled down by `factor` (= M / M'): inf if a
    configuration entry differs, else the largest relative error of the entries that scale."""
    err = 0.0
    for key in real.keys() | small.keys():
        a, b = real.get(key), small.get(key)
        if a == b:
            continue
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        if not numeric or not b:
            return float("inf")
        err = max(err, abs(a / (b * factor) - 1))
    return err


def _row_candidates(exact: float) -> list[int]:
    out = []
    for g in (128, 64, 32, 16, 8, 1):     # coarse first: a whole number of any row blocks
        r = round(exact / g) * g
        if r >= g and r not in out:
            out.append(r)
    return out


def choose_sample(op: str, arch: str, dtype: Any, n: int, m: int, k: int, real: dict[str, Any],
                  min_rows: int) -> tuple[int, int, float]:
    """(c, M', error) of the scaled-down GPU to emulate (see the module docstring)."""
    full = ARCHS[arch].default_cu_count
    c0 = min(full, max(1, -(-full * min_rows // m)))
    best: tuple[float, int, int] = (float("inf"), full, m)
    # Up to 8 x the fewest CUs first; then more (a plan whose shard count needs enough row blocks,
    # e.g. split-K on a GPU that splits only small-M layers, reproduces only from that many rows).
    for lo, hi in ((c0, min(full, 8 * c0)), (min(full, 8 * c0) + 1, full - 1)):
        for c in range(lo, hi + 1):
            for rows in _row_candidates(m * c / full):
                err = mismatch(real, plan_info(op, device(arch, c), dtype, n, rows, k), m / rows)
                if err <= 1e-3:
                    return c, rows, err
                best = min(best, (err, c, rows))
        if best[0] <= SAMPLE_TOL:
            return best[1], best[2], best[0]
    return full, m, 0.0


def _fit_rows(op: str, arch: str, dtype: Any, n: int, k: int, cus: int, rows: int,
              real: dict[str, Any]) -> tuple[int, int, dict[str, Any]] | None:
    """(r1, r2, plan) for a fitted sample when `rows` is over ROW_CAP_ELEMENTS and two shorter
    runs get the sample's plan with the same grid (only row-proportional entries differ)."""
    r2 = max(256, ROW_CAP_ELEMENTS // k // 256 * 256)
    if rows * k <= ROW_CAP_ELEMENTS or 3 * r2 > rows:      # the two runs (1.5 R rows) must halve the work
        return None
    base = plan_info(op, device(arch, cus), dtype, n, rows, k)
    scaling = {key for key in base if base[key] != real.get(key)} - {"grid"}
    plans = [plan_info(op, device(arch, cus), dtype, n, r, k) for r in (r2 // 2, r2)]
    for p in plans:
        if any(p.get(key) != base.get(key) for key in base.keys() | p.keys() if key not in scaling):
            return None
    return r2 // 2, r2, base


def measure(op: str, arch: str, dtype: Any, n: int, m: int, k: int, *, linearity: bool = False,
            min_rows: int = MIN_ROWS) -> Measurement:
    full = ARCHS[arch].default_cu_count
    try:
        real = plan_info(op, device(arch, full), dtype, n, m, k)
    except Exception as e:    # noqa: BLE001 - reported per shape, never a crash of the report
        reason = unsupported_reason(op, arch, dtype, n, k)
        if reason is not None:
            return Measurement(op, arch, n, m, k, "unsupported", reason)
        return Measurement(op, arch, n, m, k, "error", f"plan_info: {type(e).__name__}: {e}")
    cus, rows, err = choose_sample(op, arch, dtype, n, m, k, real, min_rows)
    if cus == full and rows == m and m * k * n > EMULATION_BUDGET and m > min_rows:
        return Measurement(op, arch, n, m, k, "skipped", "no scaled-down GPU reproduces the plan and the whole "
                           f"launch ({m}x{k}, N={n}) is over the emulation budget", real)
    fit = _fit_rows(op, arch, dtype, n, k, cus, rows, real)
    if fit is not None:
        # Too many rows per workgroup to emulate: two runs with fewer, same grid, fitted.
        r1, r2, info = fit
        s1 = _emulate(op, arch, cus, dtype, n, r1, k, seed=0)
        s2 = _emulate(op, arch, cus, dtype, n, r2, k, seed=1)
        sample = _fit(s1, s2, rows, info)
        return Measurement(op, arch, n, m, k, "ok", "", real, sample, m / rows, plan_error=err, fitted=(r1, r2))
    sample = _emulate(op, arch, cus, dtype, n, rows, k, seed=0)
    result = Measurement(op, arch, n, m, k, "ok", "", real, sample, m / rows, plan_error=err)
    if linearity and cus < full:
        c2, rows2 = min(full, 2 * cus), min(m, 2 * rows)
        if mismatch(real, plan_info(op, device(arch, c2), dtype, n, rows2, k), m / rows2) <= SAMPLE_TOL:
            result.check = _emulate(op, arch, c2, dtype, n, rows2, k, seed=1)
    return result
