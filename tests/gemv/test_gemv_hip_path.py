"""One GEMV through HipDevice against the fake libamdhip64: the exact HIP calls and argument bytes."""

from __future__ import annotations

import json
import struct

import paths
from fakehip import fnv1a64

from hipskinny import registry

SCENARIO = """
import json, numpy as np, hipskinny
x = np.arange(16, dtype=np.float16).reshape(1, 16)
w = np.ones((3, 16), np.float16)
b = np.ones(3, np.float16)
hipskinny.gemv(x, w, b)
print("MARK", flush=True)
hipskinny.gemv(x, w, b)
"""


def test_gemv_launch_sequence_and_kernarg(fakehip_run, hip_python):
    run = fakehip_run(SCENARIO, env={"FAKEHIP_ARCH": "gfx942:sramecc+:xnack-", "FAKEHIP_CU_COUNT": "304"},
                      hip_python=hip_python)
    recs = run.records
    launches = [r for r in recs if r["fn"] == "hipModuleLaunchKernel"]
    assert len(launches) == 2
    first = recs[:recs.index(launches[0]) + 3]
    second = recs[recs.index(launches[0]) + 3:]

    # First call: probe the runtime, stage x, w, bias through the scratch pool (each slot
    # zeroed once when allocated), load the verified code object once, launch, copy back.
    mallocs = [r for r in first if r["fn"] == "hipMalloc"]
    assert [m["size"] for m in mallocs] == [256, 256, 256, 256]
    x_d, w_d, y_d, b_d = (m["ptr"] for m in mallocs)
    copies = [r for r in first if r["fn"] == "hipMemcpyAsync"]
    assert [(r["dst"], r["size"], r["kind"]) for r in copies[:3]] == [(x_d, 32, 1), (w_d, 96, 1), (b_d, 6, 1)]
    assert (copies[3]["src"], copies[3]["size"], copies[3]["kind"]) == (y_d, 6, 2)     # device to host
    loads = [r for r in recs if r["fn"] == "hipModuleLoadData"]
    image, _ = registry.read_verified("gfx942", "gemv")
    assert len(loads) == 1 and loads[0]["size"] == len(image) and loads[0]["fnv1a64"] == fnv1a64(image)
    assert [r["name"] for r in recs if r["fn"] == "hipModuleGetFunction"] == ["gemv_f16_r1"]

    launch = launches[0]
    assert launch["grid"] == [3, 1, 1] and launch["block"] == [256, 1, 1]      # M=3 rows, 1 row per group
    assert launch["shared_mem"] == 0 and launch["stream"] == 0
    assert launch["kernel_params_null"] and not launch["extra_null"]
    kernarg = bytes.fromhex(launch["kernarg"])
    assert len(kernarg) == launch["kernarg_size"] == 48                        # the metadata's kernarg size
    assert kernarg == struct.pack("<QQQQiiq", x_d, w_d, b_d, y_d, 3, 16, 16)
    assert recs.index(launch) < recs.index([r for r in first if r["fn"] == "hipStreamSynchronize"][0])

    # Second call with the same shapes: no probing, no allocation, no load, no lookup.
    assert [r["fn"] for r in second] == ["hipMemcpyAsync", "hipMemcpyAsync", "hipMemcpyAsync",
                                         "hipModuleLaunchKernel", "hipMemcpyAsync", "hipStreamSynchronize"]
    assert bytes.fromhex(launches[1]["kernarg"]) == kernarg


def test_unsupported_gpu_arch_is_a_clear_error(fakehip_run):
    run = fakehip_run("""
import json, numpy as np, hipskinny
try:
    hipskinny.gemv(np.ones((1, 8), np.float16), np.ones((2, 8), np.float16))
except hipskinny.UnsupportedArchError as e:
    print("ERR", json.dumps(str(e)))
""", env={"FAKEHIP_ARCH": "gfx90a:sramecc+:xnack-"})
    message = json.loads(run.stdout.split("ERR ", 1)[1])
    assert "gfx90a" in message and "gfx942, gfx950, gfx1100, gfx1151, gfx1201" in message


DEVICE_TENSORS = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, hipskinny
from hip import hip
from dlpack_helpers import DL_ROCM, HandMade

def dev_tensor(shape, strides, offset_bytes=0):
    nbytes = 2 * (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) + offset_bytes
    err, ptr = hip.hipMalloc(max(nbytes, 2))
    return HandMade(None, int(ptr) + offset_bytes, shape, strides, code=2, bits=16, device=(DL_ROCM, 0))

def outcome(**kw):
    try:
        hipskinny.gemv(**kw)
        return "ok"
    except hipskinny.HipSkinnyError as e:
        return type(e).__name__ + ": " + str(e)

m, k = 5, 16
x = dev_tensor((1, k), (k, 1))
res = {{
  "ok": outcome(x=x, w=dev_tensor((m, k), (k, 1)), out=dev_tensor((1, m), (m, 1))),
  "padded_ok": outcome(x=x, w=dev_tensor((m, k), (k + 8, 1)), out=dev_tensor((1, m), (m, 1))),
  "stride": outcome(x=x, w=dev_tensor((m, k), (k + 4, 1)), out=dev_tensor((1, m), (m, 1))),
  "column": outcome(x=x, w=dev_tensor((m, k), (1, m)), out=dev_tensor((1, m), (m, 1))),
  "ptr": outcome(x=dev_tensor((1, k), (k, 1), offset_bytes=2), w=dev_tensor((m, k), (k, 1)),
                 out=dev_tensor((1, m), (m, 1))),
  "no_out": outcome(x=x, w=dev_tensor((m, k), (k, 1))),
  "host_mix": outcome(x=np.ones((1, k), np.float16), w=dev_tensor((m, k), (k, 1))),
  "out_shape": outcome(x=x, w=dev_tensor((m, k), (k, 1)), out=dev_tensor((1, m + 1), (m + 1, 1))),
}}
print("RES", json.dumps(res))
"""


def test_device_tensors_layout_rules(fakehip_run):
    """GPU-resident DLPack tensors: used in place when aligned, clear errors otherwise."""

    run = fakehip_run(DEVICE_TENSORS.format(tests=str(paths.TESTS)),
                      env={"FAKEHIP_ARCH": "gfx1100"})
    res = json.loads(run.stdout.split("RES ", 1)[1])
    assert res["ok"] == "ok" and res["padded_ok"] == "ok"
    assert res["stride"].startswith("InputValueError") and "multiple of 8 elements" in res["stride"]
    assert res["column"].startswith("InputValueError") and "contiguous along K" in res["column"]
    assert res["ptr"].startswith("InputValueError") and "16-byte aligned" in res["ptr"]
    assert res["no_out"].startswith("InputTypeError") and "out=" in res["no_out"]
    assert res["host_mix"].startswith("DeviceMismatchError")
    assert res["out_shape"].startswith("InputValueError") and "shape (1, 5)" in res["out_shape"]
    launches = [r for r in run.records if r["fn"] == "hipModuleLaunchKernel"]
    assert len(launches) == 2                                    # only the two valid calls launched
    padded = struct.unpack("<QQQQiiq", bytes.fromhex(launches[1]["kernarg"]))
    assert padded[4:] == (5, 16, 24)                             # M, K and the padded row stride
