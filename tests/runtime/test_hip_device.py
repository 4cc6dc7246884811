"""HipDevice and the HIP runtime status against a fake libamdhip64.so, for both hip-python generations.

Every scenario runs in a fresh subprocess (hip-python caches the library it opened); the fake logs
each C call with its arguments as C saw them, so these tests check what reaches the runtime.
"""

from __future__ import annotations

import json
import struct

import pytest
from fakehip import HIP_PYTHON_7, HIP_VERSION, fake_code_object, fnv1a64

PREAMBLE = """
import json, logging, sys
import hipskinny
import hipskinny.devices.hip as hipdev
from hipskinny.devices.hip import HipDevice, hip_runtime_status, check_versions
from hipskinny.errors import HipRuntimeError, InputTypeError, InputValueError

def report(**values):
    print("RESULT " + json.dumps(values))

def error_of(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return {"type": type(exc).__name__, "message": str(exc), "is_hip": isinstance(exc, HipRuntimeError),
                "name": getattr(exc, "hip_error_name", None), "call": getattr(exc, "hip_call", None)}
    return None
"""

HIP_PYTHON_VERSION = {"10": "10.0.0.0.1.2", "7": HIP_PYTHON_7}
HIP_VERSION_NAME = {"10": "7.15.26333", "7": "7.2.53211"}


def result_of(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the scenario printed no RESULT line:\n{stdout}"
    return json.loads(lines[-1][len("RESULT "):])


def fns(records: list[dict]) -> list[str]:
    return [r["fn"] for r in records]


def test_properties(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + """
d0, d1 = HipDevice(0), HipDevice(1)
p0, p1 = d0.properties, d1.properties
report(p0=vars(p0), p1=vars(p1), arch0=d0.arch.name, features0=list(d0.arch.features), arch1=d1.arch.name,
       label=d1.label, kind=d1.kind, again=d0.properties is p0)
""", env={"FAKEHIP_DEVICE_COUNT": "2", "FAKEHIP_ARCH": "gfx942:sramecc+:xnack-,gfx1100",
          "FAKEHIP_CU_COUNT": "304,48", "FAKEHIP_NAME": "Radeon Test"}, hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["p0"] == {"name": "Radeon Test", "gcn_arch_name": "gfx942:sramecc+:xnack-", "cu_count": 304,
                         "lds_per_workgroup": 65536, "wave_size": 64, "total_memory": 64 << 30}
    assert out["p1"] == {"name": "Radeon Test", "gcn_arch_name": "gfx1100", "cu_count": 48,
                         "lds_per_workgroup": 65536, "wave_size": 32, "total_memory": 64 << 30}
    assert (out["arch0"], out["features0"], out["arch1"]) == ("gfx942", ["sramecc+", "xnack-"], "gfx1100")
    assert (out["label"], out["kind"], out["again"]) == ("hip:1", "hip", True)
    # versions checked once per process, device count per device, properties once per device
    assert fns(run.records) == ["hipRuntimeGetVersion", "hipGetDeviceCount", "hipGetDevicePropertiesR0600",
                                "hipGetDeviceCount", "hipGetDevicePropertiesR0600"]
    assert [r["device"] for r in run.calls("hipGetDevicePropertiesR0600")] == [0, 1]


def test_struct_layout_matches_hip_python(fakehip_run, hip_python):
    """The fake fills hipDeviceProp_tR0600 at HIP's offsets; hip-python must read every field back."""
    run = fakehip_run(PREAMBLE + """
from hip import hip
props = hipdev._raw_properties(hip, 0)
fields = ["multiProcessorCount", "warpSize", "sharedMemPerBlock", "totalGlobalMem", "regsPerBlock",
          "maxThreadsPerBlock", "maxThreadsDim", "maxGridSize", "clockRate", "major", "minor", "l2CacheSize",
          "maxThreadsPerMultiProcessor", "memoryClockRate", "memoryBusWidth", "sharedMemPerMultiprocessor",
          "maxSharedMemoryPerMultiProcessor"]
report(fields={f: getattr(props, f) for f in fields}, arch=repr(props.gcnArchName), name=repr(props.name),
       sizeof=hip.hipDeviceProp_t.c_sizeof(props) if hasattr(hip.hipDeviceProp_t, "c_sizeof") else None)
""", env={"FAKEHIP_ARCH": "gfx950", "FAKEHIP_CU_COUNT": "256"}, hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["fields"] == {
        "multiProcessorCount": 256, "warpSize": 64, "sharedMemPerBlock": 160 * 1024, "totalGlobalMem": 64 << 30,
        "regsPerBlock": 65536, "maxThreadsPerBlock": 1024, "maxThreadsDim": [1024, 1024, 1024],
        "maxGridSize": [2147483647, 65536, 65536], "clockRate": 2100000, "major": 9, "minor": 5,
        "l2CacheSize": 4 << 20, "maxThreadsPerMultiProcessor": 2048, "memoryClockRate": 1300000,
        "memoryBusWidth": 8192, "sharedMemPerMultiprocessor": 160 * 1024,
        "maxSharedMemoryPerMultiProcessor": 160 * 1024,
    }
    assert out["sizeof"] == 1472
    # 10.x gives str, 7.x NUL-padded bytes
    if hip_python == "10":
        assert (out["arch"], out["name"]) == ("'gfx950'", "'fakehip gfx950'")
    else:
        assert out["arch"].startswith("b'gfx950") and out["name"].startswith("b'fakehip gfx950")


def test_alloc_copy_memset_round_trip(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + """
import numpy as np, ml_dtypes
d = HipDevice(0)
src = np.arange(64, dtype=np.uint32)                   # 256 bytes
ptr = d.alloc(256)
d.copy_to_device(ptr, src, 256, stream=0x77)
d.memset(ptr + 16, 0xAB, 8, stream=0x77)
back = np.zeros(64, dtype=np.uint32)
d.copy_to_host(back, ptr, 256, stream=0x77)
d.synchronize(0x77)
as_bytes = bytearray(256)
d.copy_to_host(memoryview(as_bytes), ptr, 256)
bf = np.linspace(-2, 2, 8).astype(ml_dtypes.bfloat16)
bptr = d.alloc(16)
d.copy_to_device(bptr, bf, 16)
bf_back = np.zeros(8, dtype=ml_dtypes.bfloat16)
d.copy_to_host(bf_back, bptr, 16)
d.copy_to_device(bptr, b"0123456789abcdef", 16)
tail = bytearray(4)
d.copy_to_host(tail, bptr + 12, 4)
d.free(ptr)
d.free(bptr)
report(ptr=ptr, back=back.tobytes().hex(), as_bytes=bytes(as_bytes).hex(), bf_equal=bool((bf == bf_back).all()),
       tail=bytes(tail).decode(), aligned=ptr % 256 == 0)
""", hip_python=hip_python)
    out = result_of(run.stdout)
    expected = bytearray(struct.pack("<64I", *range(64)))
    expected[16:24] = b"\xab" * 8
    assert out["back"] == expected.hex() and out["as_bytes"] == expected.hex()
    assert out["bf_equal"] and out["tail"] == "cdef" and out["aligned"]

    calls = run.records[2:]  # after hipRuntimeGetVersion, hipGetDeviceCount
    ptr = out["ptr"]
    assert [(r["fn"], r.get("size"), r.get("kind"), r.get("stream")) for r in calls[:5]] == [
        ("hipMalloc", 256, None, None),
        ("hipMemcpyAsync", 256, 1, 0x77),
        ("hipMemsetAsync", 8, None, 0x77),
        ("hipMemcpyAsync", 256, 2, 0x77),
        ("hipStreamSynchronize", None, None, 0x77),
    ]
    assert calls[0]["ptr"] == ptr and calls[1]["dst"] == ptr and calls[3]["src"] == ptr
    assert (calls[2]["dst"], calls[2]["value"]) == (ptr + 16, 0xAB)
    assert [r["fn"] for r in calls[-2:]] == ["hipFree", "hipFree"] and calls[-2]["ptr"] == ptr
    assert all(r["ret"] == 0 for r in run.records)


def test_load_module_get_function_and_launch(fakehip_run, hip_python):
    image = fake_code_object(("gemv_a", "gemv_b"), payload=bytes(range(200)))
    kernarg = bytes(range(1, 41)) + bytes(8)  # 48 bytes, trailing zeros must arrive too
    run = fakehip_run(PREAMBLE + f"""
d = HipDevice(0)
image = {image!r}
m = d.load_module(image)
fa = d.get_function(m, "gemv_a")
fb = d.get_function(m, "gemv_b")
missing = error_of(d.get_function, m, "gemv_c")
d.dispatch(fa, (3, 2, 1), (64, 1, 1), {kernarg!r}, shared_mem=128, stream=0x1234)
d.synchronize(0x1234)
report(module=m.handle, fa=fa.handle, fb=fb.handle, missing=missing)
""", hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["fa"] != out["fb"]
    missing = out["missing"]
    assert missing["is_hip"] and missing["name"] == "hipErrorNotFound"
    assert "hipModuleGetFunction('gemv_c')" in missing["message"] and "hipErrorNotFound" in missing["message"]
    assert "named symbol not found" in missing["message"] and "hipskinny probe" in missing["message"]

    # with a single GPU it is always current: no hipGetDevice/hipSetDevice round trips
    assert fns(run.records) == [
        "hipRuntimeGetVersion", "hipGetDeviceCount",
        "hipModuleLoadData",
        "hipModuleGetFunction", "hipModuleGetFunction", "hipModuleGetFunction", "hipGetErrorString",
        "hipModuleLaunchKernel",
        "hipStreamSynchronize",
    ]
    load = run.calls("hipModuleLoadData")[0]
    assert (load["size"], load["fnv1a64"], load["device"], load["module"]) == (
        len(image), fnv1a64(image), 0, out["module"])
    lookups = run.calls("hipModuleGetFunction")
    assert [(r["name"], r["module"], r["ret"]) for r in lookups] == [
        ("gemv_a", out["module"], 0), ("gemv_b", out["module"], 0), ("gemv_c", out["module"], 500)]
    launch = run.calls("hipModuleLaunchKernel")[0]
    assert launch == {
        "fn": "hipModuleLaunchKernel", "function": out["fa"], "grid": [3, 2, 1], "block": [64, 1, 1],
        "shared_mem": 128, "stream": 0x1234, "kernel_params_null": True, "extra_null": False, "device": 0,
        "kernarg": kernarg.hex(), "kernarg_size": 48, "kernel": "gemv_a", "module": out["module"], "ret": 0,
    }
    assert run.calls("hipStreamSynchronize")[0]["stream"] == 0x1234


def test_other_device_is_made_current_and_restored(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + f"""
from hip import hip
d = HipDevice(1)
m = d.load_module({fake_code_object(("k",))!r})
f = d.get_function(m, "k")
d.dispatch(f, (1, 1, 1), (32, 1, 1), b"")
import threading
worker = threading.Thread(target=d.dispatch, args=(f, (2, 1, 1), (32, 1, 1), b"w"))  # starts on device 0
worker.start()
worker.join()
report(current=hip.hipGetDevice()[1], other=error_of(HipDevice(0).get_function, m, "k"),
       bad_ordinal=error_of(lambda: HipDevice(2).properties))
""", env={"FAKEHIP_DEVICE_COUNT": "2"}, hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["current"] == 0
    assert out["other"]["type"] == "DeviceMismatchError"
    assert out["bad_ordinal"]["is_hip"] and "HIP device 2 does not exist" in out["bad_ordinal"]["message"]
    seq = [(r["fn"], r.get("device", r.get("ret"))) for r in run.records[2:]]
    assert seq[:12] == [
        ("hipGetDevice", 0), ("hipSetDevice", 1), ("hipModuleLoadData", 1), ("hipSetDevice", 0),
        ("hipGetDevice", 0), ("hipSetDevice", 1), ("hipModuleGetFunction", 0), ("hipSetDevice", 0),
        ("hipGetDevice", 0), ("hipSetDevice", 1), ("hipModuleLaunchKernel", 1), ("hipSetDevice", 0),
    ]
    first, in_worker = run.calls("hipModuleLaunchKernel")
    assert (first["kernarg"], first["kernarg_size"], first["ret"]) == ("", 0, 0)
    assert (in_worker["device"], in_worker["grid"], in_worker["kernarg"], in_worker["ret"]) == (1, [2, 1, 1], "77", 0)


def test_kernarg_buffers_of_any_size(fakehip_run, hip_python):
    """The per-thread launch config is reused and grows: every launch must carry exactly its own bytes."""
    blobs = [bytes([i % 251 for i in range(n)]) for n in (24, 700, 8, 4096, 0, 520)]
    run = fakehip_run(PREAMBLE + f"""
d = HipDevice(0)
f = d.get_function(d.load_module({fake_code_object(("k",))!r}), "k")
for blob in {blobs!r}:
    d.dispatch(f, (1, 1, 1), (64, 1, 1), blob)
d.dispatch(f, (1, 1, 1), (64, 1, 1), bytearray(b"abc"))
""", hip_python=hip_python)
    launches = run.calls("hipModuleLaunchKernel")
    assert [(r["kernarg"], r["kernarg_size"]) for r in launches] == [
        (b.hex(), len(b)) for b in [*blobs, b"abc"]]


def test_hip_errors_name_the_call(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + f"""
d = HipDevice(0)
f = d.get_function(d.load_module({fake_code_object(("k",))!r}), "k")
report(launch=error_of(d.dispatch, f, (1, 1, 1), (64, 1, 1), b"x" * 8),
       alloc=error_of(d.alloc, 1 << 20))
""", env={"FAKEHIP_FAIL": "hipModuleLaunchKernel=719,hipMalloc=2"}, hip_python=hip_python)
    out = result_of(run.stdout)
    launch, alloc = out["launch"], out["alloc"]
    assert launch["is_hip"] and launch["type"] == "HipRuntimeError"
    assert launch["name"] == "hipErrorLaunchFailure" and launch["call"] == "hipModuleLaunchKernel(k)"
    assert launch["message"].startswith("hipModuleLaunchKernel(k) failed: hipErrorLaunchFailure (719): "
                                        "unspecified launch failure.")
    assert "hipskinny probe" in launch["message"]
    assert alloc["name"] == "hipErrorOutOfMemory" and "out of memory" in alloc["message"]


def test_host_buffer_checks(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + """
import numpy as np
d = HipDevice(0)
ptr = d.alloc(64)
ro = np.zeros(16, np.uint8)
ro.flags.writeable = False
report(
    into_bytes=error_of(d.copy_to_host, b"x" * 64, ptr, 64),
    into_readonly=error_of(d.copy_to_host, ro, ptr, 16),
    strided=error_of(d.copy_to_device, ptr, np.zeros((4, 8), np.uint8)[:, ::2], 16),
    too_small=error_of(d.copy_to_device, ptr, b"abc", 8),
    not_buffer=error_of(d.copy_to_device, ptr, [1, 2, 3], 3),
    bad_value=error_of(d.memset, ptr, 256, 4),
    bad_grid=error_of(d.dispatch, None, (1, 1, 1), (1, 1, 1), b""),
    bad_ordinal=error_of(HipDevice, -1),
)
""", hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["into_bytes"]["type"] == "InputTypeError" and "read-only" in out["into_bytes"]["message"]
    assert out["into_readonly"]["type"] == "InputTypeError"
    assert out["strided"]["type"] == "InputValueError" and "contiguous" in out["strided"]["message"]
    assert out["too_small"]["type"] == "InputValueError" and "3 bytes" in out["too_small"]["message"]
    assert out["not_buffer"]["type"] == "InputTypeError"
    assert out["bad_value"]["type"] == "InputValueError"
    assert out["bad_grid"]["type"] == "InputTypeError"
    assert out["bad_ordinal"]["type"] == "InputValueError"
    # nothing but the allocation reached the runtime
    assert "hipMemcpyAsync" not in fns(run.records) and "hipMemsetAsync" not in fns(run.records)


def test_status_when_all_is_well(fakehip_run, fakehip_root, hip_python):
    run = fakehip_run(PREAMBLE + """
from hip import hip
import hip as hip_package
report(status=hip_runtime_status(), versions=check_versions(), bindings=[hip.HIP_VERSION, hip_package.HIP_VERSION])
""", env={"FAKEHIP_DEVICE_COUNT": "2", "FAKEHIP_ARCH": "gfx1201,gfx1151", "FAKEHIP_CU_COUNT": "64,40",
          "FAKEHIP_DRIVER_VERSION": "60342134"}, hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["bindings"] == [HIP_VERSION[hip_python]] * 2  # the fake's default runtime version matches
    status = out["status"]
    assert status == {
        "hip_python_installed": True,
        "hip_python_version": HIP_PYTHON_VERSION[hip_python],
        "hip_python_hip_version": HIP_VERSION[hip_python],
        "hip_python_hip_version_name": status["hip_python_hip_version_name"],
        "library_found": True,
        "library_path": str(fakehip_root / "lib" / "libamdhip64.so"),
        "missing_symbols": [],
        "runtime_version": HIP_VERSION[hip_python],
        "runtime_version_name": HIP_VERSION_NAME[hip_python],
        "driver_version": 60342134,
        "device_count": 2,
        "devices": [
            {"ordinal": 0, "name": "fakehip gfx1201", "gcn_arch_name": "gfx1201", "arch": "gfx1201", "cu_count": 64,
             "wave_size": 32, "lds_per_workgroup": 65536, "total_memory": 64 << 30},
            {"ordinal": 1, "name": "fakehip gfx1151", "gcn_arch_name": "gfx1151", "arch": "gfx1151", "cu_count": 40,
             "wave_size": 32, "lds_per_workgroup": 65536, "total_memory": 64 << 30},
        ],
        "problem": None,
        "setup_problem": None,
        "warnings": [],
    }
    assert status["hip_python_hip_version_name"].startswith(HIP_VERSION_NAME[hip_python])
    assert out["versions"]["level"] == "ok"


def test_major_version_mismatch_raises_with_install_hint(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + """
report(error=error_of(lambda: HipDevice(0).properties), status=hip_runtime_status())
""", env={"FAKEHIP_RUNTIME_VERSION": "60443482"}, hip_python=hip_python)
    out = result_of(run.stdout)
    error = out["error"]
    assert error["is_hip"]
    message = error["message"]
    assert 'pip install "hip-python==6.4.*"' in message
    bindings = f"{HIP_PYTHON_VERSION[hip_python]} was generated from HIP {HIP_VERSION_NAME[hip_python]}"
    assert f"hip-python {bindings}" in message
    assert "is HIP 6.4.43482" in message and "major versions differ (7 vs 6)" in message
    assert "hip-python 10.0.x was generated from HIP 7.15" in message and "hipskinny probe" in message
    assert out["status"]["problem"] == message
    # HipDevice stopped at the version check; only the status went on to list devices
    assert fns(run.records)[:2] == ["hipRuntimeGetVersion", "hipRuntimeGetVersion"]
    assert "hipGetDevice" not in fns(run.records)


@pytest.mark.parametrize(("generation", "runtime", "pin"), [("10", 70253211, "7.2"), ("7", 71526333, "10.0")])
def test_minor_version_mismatch_warns(fakehip_run, hip_python7, generation, runtime, pin):
    run = fakehip_run(PREAMBLE + """
logging.basicConfig(stream=sys.stdout, format="LOG %(name)s %(levelname)s %(message)s")
d = HipDevice(0)
d.properties
d.alloc(8)                      # still checked once only
report(status=hip_runtime_status())
""", env={"FAKEHIP_RUNTIME_VERSION": str(runtime)}, hip_python=generation)
    logs = [line for line in run.stdout.splitlines() if line.startswith("LOG ")]
    assert len(logs) == 1 and logs[0].startswith("LOG hipskinny WARNING ")
    assert f'pip install "hip-python=={pin}.*"' in logs[0] and "same major version" in logs[0]
    status = result_of(run.stdout)["status"]
    assert status["problem"] is None and len(status["warnings"]) == 1 and f"=={pin}.*" in status["warnings"][0]
    assert fns(run.records).count("hipRuntimeGetVersion") == 2  # HipDevice once, the status once


def test_no_library(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + """
d = HipDevice(0)
report(error=error_of(lambda: d.properties), alloc=error_of(d.alloc, 8), status=hip_runtime_status())
""", hip_python=hip_python, with_library=False)
    out = result_of(run.stdout)
    assert run.records == []
    for error in (out["error"], out["alloc"]):
        assert error["is_hip"]
        assert error["message"].startswith(
            "no HIP runtime (libamdhip64.so) found: install ROCm, or set ROCM_PATH")
        assert "LD_LIBRARY_PATH" in error["message"] and "hipskinny probe" in error["message"]
    status = out["status"]
    assert status["hip_python_installed"] and not status["library_found"]
    assert status["problem"].startswith("no HIP runtime (libamdhip64.so) found: install ROCm, or set ROCM_PATH")
    assert status["runtime_version"] is None and status["devices"] == []
    assert "Exception ignored" not in run.stderr


def test_no_gpu(fakehip_run, hip_python):
    run = fakehip_run(PREAMBLE + """
report(error=error_of(lambda: HipDevice(0).properties), status=hip_runtime_status())
""", env={"FAKEHIP_DEVICE_COUNT": "0"}, hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["error"]["is_hip"] and out["error"]["message"].startswith("no AMD GPU found")
    status = out["status"]
    assert status["library_found"] and status["device_count"] == 0 and status["devices"] == []
    assert status["problem"].startswith("no AMD GPU found: the HIP runtime")
    assert "reports 0 devices" in status["problem"]


def test_without_hip_python(fakehip_run):
    run = fakehip_run("""
import sys
sys.modules["hip"] = None          # as if hip-python were not installed
""" + PREAMBLE + """
d = HipDevice(0)
report(error=error_of(d.alloc, 8), status=hip_runtime_status(), label=d.label)
""")
    out = result_of(run.stdout)
    assert out["error"]["is_hip"] and "pip install hip-python" in out["error"]["message"]
    status = out["status"]
    assert not status["hip_python_installed"] and "pip install hip-python" in status["problem"]
    assert out["label"] == "hip:0" and run.records == []


def test_launch_hook_runs_kernels_in_process(fakehip_run, hip_python):
    """The hook a CPU emulator will use: it sees the launch and can write device memory."""
    run = fakehip_run(PREAMBLE + f"""
import ctypes, os, struct
d = HipDevice(0)
f = d.get_function(d.load_module({fake_code_object(("fill",), b"code")!r}), "fill")
out = d.alloc(16)

lib = ctypes.CDLL(os.path.join(os.environ["ROCM_PATH"], "lib", "libamdhip64.so"))
HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                        *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
seen = []
def hook(name, image, image_size, gx, gy, gz, bx, by, bz, shared, stream, kernarg, kernarg_size, user):
    args = ctypes.string_at(kernarg, kernarg_size)
    dst, value = struct.unpack("<QI", args[:12])
    ctypes.memmove(dst, struct.pack("<4I", *[value] * 4), 16)
    seen.append([name.decode(), b"code" in ctypes.string_at(image, image_size), image_size,
                 [gx, gy, gz, bx, by, bz, shared], stream])
    return 0
callback = HOOK(hook)
lib.fakehip_set_launch_hook(callback, None)
d.dispatch(f, (2, 1, 1), (64, 1, 1), struct.pack("<QI", out, 7), shared_mem=64, stream=5)
back = bytearray(16)
d.copy_to_host(back, out, 16)
lib.fakehip_set_launch_hook(None, None)
live = (ctypes.c_size_t * 4)()
n = lib.fakehip_allocations(live, None, 4)
report(seen=seen, back=list(struct.unpack("<4I", back)), live=[n, live[0] == out])
""", hip_python=hip_python)
    out = result_of(run.stdout)
    assert out["back"] == [7, 7, 7, 7] and out["live"] == [1, True]
    (name, has_code, image_size, dims, stream), = out["seen"]
    assert (name, has_code, dims, stream) == ("fill", True, [2, 1, 1, 64, 1, 1, 64], 5)
    assert image_size == run.calls("hipModuleLoadData")[0]["size"]


def test_helper_maps_the_checkout_when_hipskinny_is_not_installed(monkeypatch, tmp_path):
    import subprocess
    import sys

    import fakehip

    monkeypatch.setattr(fakehip.importlib.util, "find_spec", lambda name: None)
    paths = fakehip.hipskinny_path(tmp_path)
    assert paths == [str(tmp_path / "hipskinny-src")]
    done = subprocess.run([sys.executable, "-c", "import hipskinny.devices.hip as m; print(m.__file__)"],
                          env={**fakehip.os.environ, "PYTHONPATH": paths[0]}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "hipskinny-src" / "hipskinny" / "devices" / "hip.py")
