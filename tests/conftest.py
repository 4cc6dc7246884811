"""Shared pytest configuration."""

import gc
import os
import resource
import time

import paths
import pytest

paths.importable()      # test modules import helpers from other families' test modules by name

pytest_plugins = ["conftest_fakehip"]


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker per core the process may use, at most one per 4 GiB of available memory
    (a worker holding every arch's emulated code objects peaks near 3 GiB)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return cores
    return max(1, min(cores, kib // (4 << 20)))


# Every test process stays below this resident size (the worker count is sized for it: 4 GiB a worker).
PEAK_RSS_LIMIT_MIB = 3 * 1024
ENFORCE_PEAK_RSS = True
_peaks: dict[str, int] = {}          # process ("main", "gw0", ...) -> peak resident MiB
_gc_seconds: dict[str, float] = {}   # process -> seconds spent in the collections between modules
_collecting = {"seconds": 0.0}


def _peak_rss_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10      # KiB on Linux


def pytest_sessionfinish(session, exitstatus):
    # The emulated devices the tests keep alive (module caches) hold millions of small objects, and
    # the interpreter's collections at exit would walk them all, for minutes; nothing after the
    # session needs them collected, so they are moved out of the collector's sight.
    gc.freeze()
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:               # an xdist worker: the controller reports it
        worker["peak_rss_mib"] = _peak_rss_mib()
        worker["gc_seconds"] = _collecting["seconds"]
        return
    if not _peaks:                       # no workers: this process ran the tests
        _peaks["main"] = _peak_rss_mib()
        _gc_seconds["main"] = _collecting["seconds"]
    over = {name: mib for name, mib in _peaks.items() if mib > PEAK_RSS_LIMIT_MIB}
    if over and ENFORCE_PEAK_RSS and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# A full collection walks every object the worker holds (torch, transformers, dynamo's caches,
# decoded programs: about 2 s each late in a run, 140 s a worker over the suite). Between modules
# the collector looks only at what is younger than its last pass (everything older is frozen), and
# walks everything only once the worker's resident size has grown this much since the last full
# pass (garbage that holds frozen objects waits until then).
FULL_COLLECTION_GROWTH_MIB = 192
_last_full = {"rss_mib": 0}


def _rss_mib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def pytest_runtest_teardown(item, nextitem):
    # Between test modules, collect: a module's devices and calls form reference cycles that the
    # collector's rare full passes would leave for a long time.
    if nextitem is None or nextitem.module is not item.module:
        start = time.perf_counter()
        full = _rss_mib() - _last_full["rss_mib"] >= FULL_COLLECTION_GROWTH_MIB
        if full:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        if full:
            _last_full["rss_mib"] = _rss_mib()
        _collecting["seconds"] += time.perf_counter() - start


def pytest_testnodedown(node, error):
    """xdist controller: a worker finished; keep its peak resident size."""
    out = getattr(node, "workeroutput", {})
    if out.get("peak_rss_mib") is not None:
        _peaks[node.gateway.id] = out["peak_rss_mib"]
        _gc_seconds[node.gateway.id] = out.get("gc_seconds", 0.0)


def pytest_terminal_summary(terminalreporter):
    if not _peaks:
        return
    parts = ", ".join(f"{name} {mib} MiB" for name, mib in sorted(_peaks.items()))
    over = [name for name, mib in _peaks.items() if mib > PEAK_RSS_LIMIT_MIB]
    terminalreporter.write_line(f"peak resident memory per test process: {parts} (limit {PEAK_RSS_LIMIT_MIB} MiB)")
    terminalreporter.write_line("collecting garbage between test modules: " +
                                ", ".join(f"{name} {s:.0f} s" for name, s in sorted(_gc_seconds.items())))
    if over:
        terminalreporter.write_line(f"FAILED: {', '.join(sorted(over))} passed the {PEAK_RSS_LIMIT_MIB} MiB limit "
                                    "(tests/conftest.py PEAK_RSS_LIMIT_MIB)", red=True)


# HIPSKINNY_LAUNCH_LOG=<file>: one JSON line per emulated launch (test id, arch, kernel, grid, block,
# the by-value arguments' hash, seconds), to find tests that emulate the same launch twice (issue 24).
_LAUNCH_LOG = os.environ.get("HIPSKINNY_LAUNCH_LOG")
if _LAUNCH_LOG:
    import hashlib
    import json
    import time

    from hipskinny.emulator import device as _emulated

    _current = {"test": ""}
    _original_launch = _emulated.EmulatedDevice._launch

    def _logged_launch(self, function, grid, block, kernarg, shared_mem):
        module, kernel = function
        values = bytearray(kernarg)
        for arg in kernel.args:
            if arg.value_kind == "global_buffer" or arg.is_hidden:
                values[arg.offset:arg.offset + arg.size] = bytes(arg.size)
        start = time.perf_counter()
        try:
            return _original_launch(self, function, grid, block, kernarg, shared_mem)
        finally:
            with open(_LAUNCH_LOG, "a") as log:
                log.write(json.dumps({"test": _current["test"], "arch": module.code.arch, "kernel": kernel.name,
                                      "grid": list(grid), "block": list(block), "shared": shared_mem,
                                      "args": hashlib.sha1(bytes(values)).hexdigest()[:12],
                                      "seeded": self.seed is not None,
                                      "s": round(time.perf_counter() - start, 4)}) + "\n")

    _emulated.EmulatedDevice._launch = _logged_launch

    def pytest_runtest_setup(item):
        _current["test"] = item.nodeid


@pytest.fixture
def keep_shards(monkeypatch):
    """Lifts the planner's cap on split-K partials (``_splitk.PARTIAL_SHARE``) so that the small shapes
    an emulated test can afford still split K and exercise the shard reduction; the cap itself is
    tested at real shapes (tests/skinny_gemm/test_skinny_gemm_splitk.py)."""
    from hipskinny import ops
    from hipskinny.ops import _splitk
    ops.forget_plans()          # plans cached under a device another test made hold the cap's shards
    monkeypatch.setattr(_splitk, "PARTIAL_SHARE", 1e9)
    yield
    ops.forget_plans()


@pytest.fixture
def force_slices(monkeypatch):
    """``force(S)``: from then on split-K plans take S slices per unit wherever the code object builds
    them (`_splitk.built_slices`), one elsewhere, with the planner's unit length for S (or one) slices --
    every slice variant runs on the emulator, not only those the planner picks for a test's small shapes."""
    from hipskinny import ops
    from hipskinny.ops import _splitk
    split = _splitk.splitk_split

    def force(s: int, unit_groups: int | None = None, block_groups: int | None = None) -> None:
        """(``unit_groups``: also the units' length in 128-column groups, instead of the planner's;
        ``block_groups``: a row block's stride in the walk, default unpadded.)"""
        def forced(*args, slices=(1,), **kwargs):
            own = tuple(x for x in slices if x in (1, s))
            _, length, stride = split(*args, slices=own, **kwargs)
            if unit_groups is not None:
                length, stride = unit_groups, block_groups or -(-args[3] // _splitk.SPLITK_GROUP)
            return (s if s in slices else 1), length, stride
        monkeypatch.setattr(_splitk, "splitk_split", forced)
        ops.forget_plans()
    yield force
    ops.forget_plans()
