"""The fake HIP runtime's stream capture and graphs, through both hip-python generations.

hipskinny's capture tests (tests/runtime/test_call_path_hip.py) rely on the fake to refuse everything a
capture forbids, so these tests pin the fake down first: a test must never pass because the fake
is lax. Each generation runs one subprocess (a fresh process is needed per hip-python library
load, and each costs about a second); it performs every check, prints the results as one JSON
line and leaves the fake's call log, and the tests below examine both.

Error codes (hipError_t): 1 InvalidValue, 101 InvalidDevice, 401 IllegalState,
900 StreamCaptureUnsupported, 901 StreamCaptureInvalidated, 906 StreamCaptureImplicit,
908 StreamCaptureWrongThread. Capture status: 0 None, 1 Active, 2 Invalidated.
"""

from __future__ import annotations

import json
from typing import Any

import paths
import pytest
from fakehip import fake_code_object

TESTS = str(paths.TESTS)

SCENARIO = r"""
import ctypes, json, struct, sys, threading
sys.path.insert(0, TESTS)
from hip import hip
from fakehip.scenario import LAUNCH_HOOK, code, fake_library, graph_instantiate, live_allocations, ok

R = {}

GLOBAL = hip.hipStreamCaptureMode.hipStreamCaptureModeGlobal
THREAD_LOCAL = hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal
RELAXED = hip.hipStreamCaptureMode.hipStreamCaptureModeRelaxed
H2D = hip.hipMemcpyKind.hipMemcpyHostToDevice

lib = fake_library()
lib.hipGetErrorName.restype = ctypes.c_char_p

# A counting launch hook: what ran, with which arguments, and whether the pointer in the first
# eight kernarg bytes (if any) still lies in a live allocation.
ran = []
ran_lock = threading.Lock()

def on_launch(kernel, image, image_size, gx, gy, gz, bx, by, bz, shared, stream, kernarg, size, user):
    data = ctypes.string_at(kernarg, size) if kernarg else b""
    live = None
    if size >= 8:
        p = struct.unpack_from("<Q", data)[0]
        live = any(a <= p < a + n for a, n in live_allocations(lib))
    with ran_lock:
        ran.append({"kernel": kernel.decode(), "kernarg": data.hex(), "stream": stream or 0,
                    "grid": [gx, gy, gz], "live": live, "thread": threading.get_ident()})
    return 0

hook = LAUNCH_HOOK(on_launch)
lib.fakehip_set_launch_hook(hook, None)

# One reusable kernarg buffer, as hipskinny keeps one: the runtime must copy it at launch time.
kbuf = ctypes.create_string_buffer(64)
ksize = ctypes.c_size_t(0)
extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(kbuf), 2, ctypes.addressof(ksize), 3)

def launch(f, stream, kernarg, grid=(1, 1, 1), buf=None):
    if buf is None:
        ctypes.memmove(kbuf, kernarg, len(kernarg))
        ksize.value = len(kernarg)
        args = extra
    else:
        args = buf
    return code(hip.hipModuleLaunchKernel(f, *grid, 64, 1, 1, 0, stream, None, args))

def private_extra(kernarg):
    b = ctypes.create_string_buffer(kernarg, max(len(kernarg), 1))
    n = ctypes.c_size_t(len(kernarg))
    return (b, n, (ctypes.c_void_p * 5)(1, ctypes.addressof(b), 2, ctypes.addressof(n), 3))

def instantiate(graph):
    result = graph_instantiate(graph)                  # its code checked by the tests, not here
    return code(result), result[1]

def status(stream):
    result = hip.hipStreamIsCapturing(stream)
    return [code(result), int(result[1])]

def end(stream):
    result = hip.hipStreamEndCapture(stream)
    return code(result), result[1]

def in_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]

ok(hip.hipSetDevice(0))
module = ok(hip.hipModuleLoadData(IMAGE))
k1 = ok(hip.hipModuleGetFunction(module, b"k1"))
k2 = ok(hip.hipModuleGetFunction(module, b"k2"))
s = int(ok(hip.hipStreamCreate()))
s2 = int(ok(hip.hipStreamCreate()))
s_nb = int(ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking)))
ptr = int(ok(hip.hipMalloc(256)))
host = ctypes.create_string_buffer(b"h" * 16)
R["streams"] = {"s": s, "s2": s2, "s_nb": s_nb}

# -- capture, record, replay --------------------------------------------------------------------
print("MARK replay", flush=True)
R["before"] = status(s)
R["begin"] = code(hip.hipStreamBeginCapture(s, GLOBAL))
R["during"] = status(s)
info = hip.hipStreamGetCaptureInfo(s)
R["info"] = [code(info), int(info[1]), int(info[2])]
R["null_during"] = status(0)
R["other_during"] = status(s2)
R["launch1"] = launch(k1, s, b"A" * 16, grid=(3, 1, 1))
R["launch2"] = launch(k2, s, b"B" * 8)
ctypes.memmove(kbuf, b"Z" * 16, 16)            # the caller reuses its buffer: the capture kept a copy
R["ran_while_capturing"] = len(ran)
# Other streams stay usable for asynchronous work (as in HIP), and do not disturb the capture.
R["other_copy"] = code(hip.hipMemcpyAsync(ptr, ctypes.addressof(host), 16, H2D, s2))
R["other_launch"] = launch(k1, s2, b"C" * 4)
R["ran_other"] = [r["kernel"] for r in ran]
R["still_active"] = status(s)
R["end"], graph = end(s)
R["graph_none"] = graph is None
R["after"] = status(s)
R["instantiate"], gexec = instantiate(graph)
R["graph_destroy"] = code(hip.hipGraphDestroy(graph))      # the executable graph keeps its own copy
del ran[:]
R["replay1"] = code(hip.hipGraphLaunch(gexec, s))
R["replay2"] = code(hip.hipGraphLaunch(gexec, s2))
R["replayed"] = [[r["kernel"], r["kernarg"], r["stream"], r["grid"]] for r in ran]
R["exec_destroy"] = code(hip.hipGraphExecDestroy(gexec))
R["replay_destroyed"] = code(hip.hipGraphLaunch(gexec, s))
R["graph_destroy_again"] = code(hip.hipGraphDestroy(graph))

# -- misuse of the capture API ------------------------------------------------------------------
print("MARK misuse", flush=True)
R["begin_null"] = code(hip.hipStreamBeginCapture(0, GLOBAL))
R["end_not_capturing"] = end(s)[0]
ok(hip.hipStreamBeginCapture(s, GLOBAL))
R["begin_twice"] = code(hip.hipStreamBeginCapture(s, GLOBAL))
R["end_wrong_thread"] = in_thread(lambda: end(s)[0])
c, g = end(s)
R["end_own_thread"] = [c, g is not None]
ok(hip.hipGraphDestroy(g))

# -- calls a capture forbids --------------------------------------------------------------------
ok(hip.hipStreamBeginCapture(s, GLOBAL))           # a graph to launch onto a capturing stream
launch(k1, s, b"G" * 4)
c, g = end(s)
_, gexec2 = instantiate(g)

FORBIDDEN = {
    "hipMalloc": lambda: code(hip.hipMalloc(64)),
    "hipFree": lambda: code(hip.hipFree(ptr)),
    "hipMemcpy": lambda: code(hip.hipMemcpy(ptr, ctypes.addressof(host), 16, H2D)),
    "hipMemset": lambda: code(hip.hipMemset(ptr, 0, 16)),
    "hipMemcpyAsync(capturing)": lambda: code(hip.hipMemcpyAsync(ptr, ctypes.addressof(host), 16, H2D, s)),
    "hipMemsetAsync(capturing)": lambda: code(hip.hipMemsetAsync(ptr, 0, 16, s)),
    "hipMemcpyAsync(null)": lambda: code(hip.hipMemcpyAsync(ptr, ctypes.addressof(host), 16, H2D, 0)),
    "hipMemsetAsync(null)": lambda: code(hip.hipMemsetAsync(ptr, 0, 16, 0)),
    "hipStreamSynchronize(capturing)": lambda: code(hip.hipStreamSynchronize(s)),
    "hipStreamSynchronize(other)": lambda: code(hip.hipStreamSynchronize(s2)),
    "hipStreamSynchronize(null)": lambda: code(hip.hipStreamSynchronize(0)),
    "hipDeviceSynchronize": lambda: code(hip.hipDeviceSynchronize()),
    "hipModuleLaunchKernel(null)": lambda: launch(k1, 0, b"N" * 4),
    "hipGraphLaunch(capturing)": lambda: code(hip.hipGraphLaunch(gexec2, s)),
    "hipMalloc(other thread)": lambda: in_thread(lambda: code(hip.hipMalloc(64))),
}
del ran[:]
R["forbidden"] = {}
for name, call in FORBIDDEN.items():
    print("MARK forbidden " + name, flush=True)
    begin = code(hip.hipStreamBeginCapture(s, GLOBAL))
    first = launch(k1, s, b"F" * 4)
    got = call()
    st = status(s)
    later = launch(k1, s, b"L" * 4)
    c, g = end(s)
    R["forbidden"][name] = [begin, first, got, st[1], later, c, g is None, status(s)[1]]
R["ran_forbidden"] = len(ran)
R["free_after"] = code(hip.hipFree(ptr))           # allowed again once the capture is over
ptr = int(ok(hip.hipMalloc(256)))

# -- capture modes --------------------------------------------------------------------------------
print("MARK modes", flush=True)
ok(hip.hipStreamBeginCapture(s, RELAXED))
m = hip.hipMalloc(64)
R["relaxed"] = {"malloc": code(m), "free": code(hip.hipFree(m[1])), "sync_other": code(hip.hipStreamSynchronize(s2)),
                "status": status(s), "memcpy": code(hip.hipMemcpy(ptr, ctypes.addressof(host), 16, H2D))}
R["relaxed"]["end"] = end(s)[0]
ok(hip.hipStreamBeginCapture(s, RELAXED))
p = int(ok(hip.hipMalloc(64)))
R["relaxed_clean_end"] = end(s)[0]
ok(hip.hipFree(p))

def malloc_free():
    m = hip.hipMalloc(64)
    return [code(m), code(hip.hipFree(m[1]))]

ok(hip.hipStreamBeginCapture(s, THREAD_LOCAL))
R["thread_local"] = {
    "other_thread_malloc_free": in_thread(malloc_free),
    "own_malloc": code(hip.hipMalloc(64)),
    "end": end(s)[0],
}

ok(hip.hipStreamBeginCapture(s_nb, GLOBAL))
R["non_blocking"] = {"null_status": status(0), "status": status(s_nb), "end": end(s_nb)[0]}

R["names"] = {str(e): lib.hipGetErrorName(e).decode() for e in (401, 900, 901, 906, 908)}

# -- a dangling scratch pointer in a replayed graph -------------------------------------------
print("MARK dangling", flush=True)
scratch = int(ok(hip.hipMalloc(256)))
ok(hip.hipStreamBeginCapture(s, GLOBAL))
launch(k1, s, struct.pack("<Q", scratch))
c, g = end(s)
_, gexec3 = instantiate(g)
del ran[:]
ok(hip.hipGraphLaunch(gexec3, s))
live_before = ran[-1]["live"]
ok(hip.hipFree(scratch))
ok(hip.hipGraphLaunch(gexec3, s))
R["dangling"] = [live_before, ran[-1]["live"]]

# -- two devices, a current device per thread -----------------------------------------------------
print("MARK devices", flush=True)
def on_device_1():
    out = {"device_before": ok(hip.hipGetDevice())}
    ok(hip.hipSetDevice(1))
    out["device_after"] = ok(hip.hipGetDevice())
    out["foreign_function"] = code(hip.hipModuleGetFunction(module, b"k1"))
    out["foreign_launch"] = launch(k1, s2, b"X" * 4)
    m1 = ok(hip.hipModuleLoadData(IMAGE))
    f1 = ok(hip.hipModuleGetFunction(m1, b"k1"))
    st = int(ok(hip.hipStreamCreate()))
    out["own_launch"] = launch(f1, st, b"Y" * 4)
    ok(hip.hipStreamBeginCapture(st, GLOBAL))
    out["captured_launch"] = launch(f1, st, b"W" * 4)
    c, g = end(st)
    _, ge = instantiate(g)
    out["replay"] = code(hip.hipGraphLaunch(ge, st))
    out["stream"] = st
    out["module"] = int(m1)
    return out
R["device1"] = in_thread(on_device_1)
R["main_device"] = ok(hip.hipGetDevice())
R["main_launch"] = launch(k1, s2, b"M" * 4)

# Concurrent launches from several threads on both devices: every log line must stay whole and
# carry the launching thread's device.
def hammer(device, n, out):
    ok(hip.hipSetDevice(device))
    m = ok(hip.hipModuleLoadData(IMAGE))
    f = ok(hip.hipModuleGetFunction(m, b"k2"))
    st = int(ok(hip.hipStreamCreate()))
    keep, size, args = private_extra(struct.pack("<I", device) * 4)
    codes = [launch(f, st, None, buf=args) for _ in range(n)]
    out.append({"device": device, "stream": st, "codes": sorted(set(codes)), "n": n})

del ran[:]
hammered = []
threads = [threading.Thread(target=hammer, args=(i % 2, 200, hammered)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
R["hammer"] = hammered
R["hammer_ran"] = len(ran)
print("RESULT " + json.dumps(R), flush=True)
"""

_results: dict[str, tuple[dict[str, Any], list[dict]]] = {}


def scenario(fakehip_run, hip_python: str) -> tuple[dict[str, Any], list[dict]]:
    """Run the scenario once per hip-python generation; every test reads the same run."""
    if hip_python not in _results:
        image = fake_code_object(("k1", "k2"))
        run = fakehip_run(f"IMAGE = {image!r}\nTESTS = {TESTS!r}\n" + SCENARIO,
                          env={"FAKEHIP_DEVICE_COUNT": "2", "FAKEHIP_ARCH": "gfx942,gfx1100"},
                          hip_python=hip_python, timeout=60)
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, f"the scenario printed no RESULT:\n{run.stdout}\n{run.stderr}"
        _results[hip_python] = (json.loads(lines[-1][len("RESULT "):]), run.records)
    return _results[hip_python]


def test_capture_records_launches_and_replays_them(fakehip_run, hip_python):
    res, records = scenario(fakehip_run, hip_python)
    s, s2 = res["streams"]["s"], res["streams"]["s2"]
    assert res["before"] == [0, 0] and res["begin"] == 0 and res["during"] == [0, 1]
    assert res["info"][:2] == [0, 1] and res["info"][2] > 0
    assert res["null_during"][0] == 906            # the null stream may not be asked while a blocking stream captures
    assert res["other_during"] == [0, 0]
    assert res["launch1"] == res["launch2"] == 0 and res["ran_while_capturing"] == 0
    assert res["other_copy"] == res["other_launch"] == 0 and res["ran_other"] == ["k1"]
    assert res["still_active"] == [0, 1]
    assert res["end"] == 0 and not res["graph_none"] and res["after"] == [0, 0]
    assert res["instantiate"] == res["graph_destroy"] == 0
    assert res["replay1"] == res["replay2"] == 0
    # In order, with the arguments as they were at capture time, on the stream the graph runs on.
    assert res["replayed"] == [
        ["k1", "41" * 16, s, [3, 1, 1]], ["k2", "42" * 8, s, [1, 1, 1]],
        ["k1", "41" * 16, s2, [3, 1, 1]], ["k2", "42" * 8, s2, [1, 1, 1]],
    ]
    assert res["exec_destroy"] == 0 and res["replay_destroyed"] == 1 and res["graph_destroy_again"] == 401

    begin = next(i for i, r in enumerate(records) if r["fn"] == "hipStreamBeginCapture")
    end = next(i for i, r in enumerate(records) if r["fn"] == "hipStreamEndCapture")
    captured = [r for r in records[begin:end] if r["fn"] == "hipModuleLaunchKernel" and r["stream"] == s]
    capture_id = records[begin]["id"]
    assert [(r["kernel"], r["kernarg"], r.get("captured"), r.get("capture_id")) for r in captured] == [
        ("k1", "41" * 16, True, capture_id), ("k2", "42" * 8, True, capture_id)]
    other = [r for r in records[begin:end] if r["fn"] == "hipModuleLaunchKernel" and r["stream"] == s2]
    assert len(other) == 1 and "captured" not in other[0]
    assert records[end]["launches"] == 2 and records[end]["id"] == capture_id
    replays = [r for r in records if r["fn"] == "fakehip_graph_kernel"][:4]
    assert [(r["index"], r["kernel"], r["stream"], r["device"], r["ret"]) for r in replays] == [
        (0, "k1", s, 0, 0), (1, "k2", s, 0, 0), (0, "k1", s2, 0, 0), (1, "k2", s2, 0, 0)]


def test_capture_api_misuse(fakehip_run, hip_python):
    res, _ = scenario(fakehip_run, hip_python)
    assert res["begin_null"] == 900                # capture never starts on the null stream
    assert res["end_not_capturing"] == 401
    assert res["begin_twice"] == 401
    assert res["end_wrong_thread"] == 908          # a global capture ends on the thread that began it
    assert res["end_own_thread"] == [0, True]
    assert res["names"] == {"401": "hipErrorIllegalState", "900": "hipErrorStreamCaptureUnsupported",
                            "901": "hipErrorStreamCaptureInvalidated", "906": "hipErrorStreamCaptureImplicit",
                            "908": "hipErrorStreamCaptureWrongThread"}


FORBIDDEN_CODES = {
    "hipMalloc": 900, "hipFree": 900, "hipMemcpy": 906, "hipMemset": 906,
    "hipMemcpyAsync(capturing)": 900, "hipMemsetAsync(capturing)": 900,
    "hipMemcpyAsync(null)": 906, "hipMemsetAsync(null)": 906,
    "hipStreamSynchronize(capturing)": 900, "hipStreamSynchronize(other)": 900,
    "hipStreamSynchronize(null)": 906, "hipDeviceSynchronize": 900,
    "hipModuleLaunchKernel(null)": 906, "hipGraphLaunch(capturing)": 900, "hipMalloc(other thread)": 900,
}


def test_forbidden_calls_fail_and_invalidate_the_capture(fakehip_run, hip_python):
    res, records = scenario(fakehip_run, hip_python)
    assert set(res["forbidden"]) == set(FORBIDDEN_CODES)
    for name, expected in FORBIDDEN_CODES.items():
        begin, first, got, status, later, end, graph_none, final = res["forbidden"][name]
        assert (begin, first, got) == (0, 0, expected), name
        assert status == 2, name                    # invalidated ...
        assert later == 901, name                   # ... so further launches on it fail
        assert (end, graph_none, final) == (901, True, 0), name
    assert res["ran_forbidden"] == 0                # nothing ran: not the captured launches, not the refused one
    assert res["free_after"] == 0
    # Each refused call names the capture it invalidated.
    ids = [r["id"] for r in records if r["fn"] == "hipStreamBeginCapture" and r["ret"] == 0]
    refused = [r for r in records if r["ret"] in (900, 906) and "invalidated" in r]
    assert len(refused) == len(FORBIDDEN_CODES) + 2  # and test_capture_modes' relaxed hipMemcpy, own hipMalloc
    assert all(len(r["invalidated"]) == 1 and r["invalidated"][0] in ids for r in refused)


def test_capture_modes(fakehip_run, hip_python):
    res, _ = scenario(fakehip_run, hip_python)
    # Relaxed: allocation and other streams are fine, synchronous copies are not (any mode).
    assert res["relaxed"] == {"malloc": 0, "free": 0, "sync_other": 0, "status": [0, 1], "memcpy": 906,
                              "end": 901}
    assert res["relaxed_clean_end"] == 0
    # Thread-local: only the capturing thread is restricted.
    assert res["thread_local"] == {"other_thread_malloc_free": [0, 0], "own_malloc": 900, "end": 901}
    # A non-blocking stream's capture does not make the null stream's status an error.
    assert res["non_blocking"] == {"null_status": [0, 0], "status": [0, 1], "end": 0}


def test_replay_uses_captured_pointers(fakehip_run, hip_python):
    res, _ = scenario(fakehip_run, hip_python)
    # The scratch pointer baked into the graph is live at the first replay and dangling after
    # hipFree: the emulator would fault on it, as a GPU would read freed memory.
    assert res["dangling"] == [True, False]


def test_two_devices_with_a_current_device_per_thread(fakehip_run, hip_python):
    res, records = scenario(fakehip_run, hip_python)
    d1 = res["device1"]
    assert d1["device_before"] == 0 and d1["device_after"] == 1 and res["main_device"] == 0
    assert d1["foreign_function"] == 101 and d1["foreign_launch"] == 101
    assert d1["own_launch"] == d1["captured_launch"] == d1["replay"] == 0
    assert res["main_launch"] == 0
    launches = [r for r in records if r["fn"] == "hipModuleLaunchKernel"]
    foreign = [r for r in launches if r["ret"] == 101]
    assert len(foreign) == 1 and foreign[0]["device"] == 1
    assert [r["device"] for r in launches if r["stream"] == d1["stream"]] == [1, 1]
    loads = [r for r in records if r["fn"] == "hipModuleLoadData" and r["module"] == d1["module"]]
    assert loads[0]["device"] == 1
    replayed = [r for r in records if r["fn"] == "fakehip_graph_kernel" and r["stream"] == d1["stream"]]
    assert [(r["device"], r["kernarg"]) for r in replayed] == [(1, "57" * 4)]
    # Concurrent launches: every line parsed (run_with_fakehip loads each one as JSON), each
    # thread's launches carry its own device, and all of them ran.
    assert len(res["hammer"]) == 4 and res["hammer_ran"] == 800
    for h in res["hammer"]:
        mine = [r for r in launches if r["stream"] == h["stream"]]
        assert h["codes"] == [0] and len(mine) == h["n"]
        assert {(r["device"], r["kernarg"], r["ret"]) for r in mine} == {
            (h["device"], bytes([h["device"], 0, 0, 0]).hex() * 4, 0)}


@pytest.fixture(autouse=True, scope="module")
def _forget_runs():
    yield
    _results.clear()
