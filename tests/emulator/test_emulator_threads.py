"""Streams and threads, as on hardware (issue 24): host threads calling ops at once on one emulated
device, and on several, get bitwise the results of the same calls made one after another.

Work on one stream runs in enqueue order, never interleaved, whichever thread enqueued it; a call's
launches that pass data through the stream's scratch (the dequantize + skinny_gemm route of
matmul_4bit: weights in a scratch slot) are enqueued as one. The mix: split-K skinny_gemm at N = 16
and 24, W8A16 fp8_linear, 4-bit matmul fused and through the route, each with several weights of
one shape (so interleaved calls would read another call's scratch), with host (numpy) operands and
with device-resident ones (torch tensors over the emulated device's memory, used in place through
the test seam `operands.present_cpu_torch_as_gpu`), on the null stream and on a stream of their own.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
from collections.abc import Callable
from contextlib import nullcontext

import ml_dtypes
import numpy as np
import pytest
import torch

import hipskinny
from hipskinny import bnb, fp8, operands
from hipskinny import devices as _devices
from hipskinny.emulator import EmulatedDevice

K, M = 256, 64
NS = (16, 24)
THREADS = 4
CALLS = 8                            # per thread
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
TORCH = {np.dtype(np.float16): torch.float16, np.dtype(np.uint8): torch.uint8,
         np.dtype(np.float32): torch.float32, F8: torch.float8_e4m3fn}
# Every other call takes the route (two launches sharing a scratch slot), the others cycle through
# split-K skinny_gemm, fp8_linear and fused matmul_4bit.
OPS = ("matmul_4bit_route", "skinny_gemm", "matmul_4bit_route", "fp8_linear", "matmul_4bit_route", "matmul_4bit")
_stream = threading.local()          # .s: the stream this thread's device-resident calls run on
_expected: dict[tuple[str, tuple], np.ndarray] = {}    # (arch, job) -> bits of a sequential run


@functools.cache
def _device(arch: str, which: int) -> EmulatedDevice:
    # host-backed: the device's memory has real addresses, so torch tensors can live in it
    return EmulatedDevice(arch, 2, host_backed=True)


def _on(dev: EmulatedDevice, a: np.ndarray) -> torch.Tensor:
    """A torch CPU tensor over the emulated device's memory holding ``a`` (a "GPU tensor" under the seam)."""
    a = np.ascontiguousarray(a)
    t = _empty_on(dev, a.shape, TORCH[a.dtype])
    t.view(torch.uint8).view(-1).numpy()[:] = a.reshape(-1).view(np.uint8)
    return t


def _empty_on(dev: EmulatedDevice, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    n = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
    ptr = dev.alloc(max(n, 4))
    raw = dev.memory.find(ptr).data[:n]
    return torch.from_numpy(raw).view(dtype).view(shape)


def _jobs(t: int, device_resident: bool) -> list[tuple[str, int, int, bool]]:
    """Thread ``t``'s calls: (op, N, which weight, device-resident operands). Two weights of one
    shape: calls that read another's scratch would get the other weight's result."""
    return [(OPS[(t + i) % len(OPS)], NS[(t + i // 2) % 2], (t + i // 3) % 2, device_resident and (t + i) % 3 != 2)
            for i in range(CALLS)]


class Runner:
    """Runs one job with host or device-resident operands; device-resident ones on ``shared``."""

    def __init__(self, arch: str, shared: EmulatedDevice) -> None:
        rng = np.random.default_rng(24)
        xs = {n: rng.standard_normal((n, K)).astype(np.float16) for n in NS}
        ws = [(rng.standard_normal((M, K)) / 16).astype(np.float16) for _ in range(2)]
        d = {"x": xs, "w": ws, "w8": [fp8.quantize(w, granularity="channel", flavor="ocp") for w in ws],
             "q4": [bnb.quantize_4bit(w, blocksize=64, quant_type="nf4") for w in ws]}
        self.d, self.shared = d, shared
        on = functools.partial(_on, shared)
        self.xd = {n: on(x) for n, x in d["x"].items()}
        self.wd = [on(w) for w in d["w"]]
        self.w8d = [(on(q), on(s)) for q, s in d["w8"]]
        self.q4d = [(on(p), dataclasses.replace(st, absmax=on(st.absmax), code=on(st.code))) for p, st in d["q4"]]

    def __call__(self, job: tuple[str, int, int, bool]) -> np.ndarray:
        op, n, j, dev_res = job
        d = self.d
        x = self.xd[n] if dev_res else d["x"][n]
        if op == "skinny_gemm":
            y = hipskinny.skinny_gemm(x, self.wd[j] if dev_res else d["w"][j])
        elif op == "fp8_linear":
            q, s = self.w8d[j] if dev_res else d["w8"][j]
            y = hipskinny.fp8_linear(x, q, s)
        else:
            packed, st = self.q4d[j] if dev_res else d["q4"][j]
            y = bnb.matmul_4bit(x, packed, st, fused=False if op == "matmul_4bit_route" else None)
        return (y.numpy() if dev_res else y).view(np.uint16).copy()


@pytest.fixture
def seam(monkeypatch):
    """Device-resident torch tensors on the device installed as HIP device 0, on this thread's stream."""
    def install(dev: EmulatedDevice) -> None:
        monkeypatch.setitem(_devices._hip_devices, 0, dev)
        operands.present_cpu_torch_as_gpu(0, lambda ordinal: getattr(_stream, "s", 0),
                                          lambda shape, dtype: _empty_on(dev, shape, dtype))
    yield install
    operands.present_cpu_torch_as_gpu(None)


def _run_threads(work: list) -> list:
    results: list = [None] * len(work)
    errors: list = []

    def worker(i: int) -> None:
        try:
            results[i] = work[i]()
        except BaseException as e:   # noqa: BLE001 -- reported by the test
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@functools.cache
def _runner(arch: str) -> Runner:
    return Runner(arch, _device(arch, 0))


@pytest.mark.parametrize("layout", ["one device", "half on their own devices"])
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_threads_match_a_sequential_run(arch, layout, seam, monkeypatch):
    shared = _device(arch, 0)
    seam(shared)
    monkeypatch.setattr(_devices, "default_device", shared)       # threads that choose nothing run here
    run = _runner(arch)
    # Thread t's device (None: the shared default device) and calls: on the shared device, host and
    # device-resident operands; on a thread's own device (odd threads, second layout), host ones.
    own = layout != "one device"
    devs = [_device(arch, 1 + t // 2) if own and t % 2 else None for t in range(THREADS)]
    jobs = [_jobs(t, devs[t] is None) for t in range(THREADS)]
    for job in (job for mine in jobs for job in mine):       # the sequential run (main thread, null stream)
        if (arch, job) not in _expected:
            _expected[arch, job] = run(job)

    def thread(t: int) -> Callable[[], list[np.ndarray]]:
        def go() -> list[np.ndarray]:
            _stream.s = 0x5000 if t == 2 else 0      # thread 2's device-resident calls: a stream of its own
            with hipskinny.on_device(devs[t]) if devs[t] is not None else nullcontext():
                return [run(job) for job in jobs[t]]
        return go

    # Switching threads often (every 20 µs, not 5 ms) lets the threads' calls meet at every step.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    try:
        got = _run_threads([thread(t) for t in range(THREADS)])
    finally:
        sys.setswitchinterval(interval)
    kernels = {s.kernel.split("_n")[0] for s in shared.launches}
    for t in range(THREADS):
        for job, y in zip(jobs[t], got[t], strict=True):
            assert np.array_equal(y, _expected[arch, job]), (t, job)
    # what ran: the split-K kernels, and the route's two launches, on the shared device
    assert any("splitk" in k for k in kernels) and any(k.startswith("dequantize_4bit") for k in kernels), kernels
    assert sum(job[0] == "matmul_4bit_route" and job[3] for mine in jobs for job in mine) >= 4
    for t in range(1, THREADS, 2):
        if own:
            assert devs[t].launches, t


def test_allocations_and_copies_from_many_threads():
    """Threads allocating, copying, setting and freeing device memory at once (host-backed: the
    allocations land anywhere, before or after one another) each get back exactly their own bytes."""
    dev = EmulatedDevice("gfx942", 2, host_backed=True)
    errors: list[str] = []

    def worker(t: int) -> None:
        rng = np.random.default_rng(t)
        for i in range(1000):
            n = int(rng.integers(1, 5000))
            data = rng.integers(0, 256, n, dtype=np.uint8)
            cut = n // 3
            back = np.empty(n, np.uint8)
            try:
                ptr = dev.alloc(n)
                dev.copy_to_device(ptr, data, n)
                dev.memset(ptr, t + 1, cut)
                dev.copy_to_host(back, ptr, n)
                dev.free(ptr)
            except Exception as e:   # noqa: BLE001 -- a fault or a broken index: reported below
                errors.append(f"thread {t}, round {i}: {type(e).__name__}: {e}")
                continue
            if not (back[:cut] == t + 1).all() or not np.array_equal(back[cut:], data[cut:]):
                errors.append(f"thread {t}, round {i}: {n} bytes came back changed")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert dev.memory.find(dev.alloc(8)) is not None


def test_lookups_never_see_a_half_made_change():
    """Memory's index of allocations changes whole: a lookup racing allocations and frees placed
    before the one it looks for finds that one (the lists once were edited in two steps)."""
    mem = EmulatedDevice("gfx942", 2).memory
    target = mem.alloc(4096)
    mem.view(target, 4096)[:] = 7
    below = np.zeros(256, np.uint8)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for k in range(16):            # below every allocation of the device: shifts them all
                mem.register(0x100000 + k * 0x1000, below, "churn")
            for k in range(16):
                mem.free(0x100000 + k * 0x1000)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    th = threading.Thread(target=churn)
    th.start()
    try:
        found = [mem.find(target + 8, 8) for _ in range(50000)]
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(interval)
    assert sum(a is None or a.base != target for a in found) == 0
    assert (mem.view(target, 4096) == 7).all()
