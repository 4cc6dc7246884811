"""One GEMV through HipDevice against the fake libamdhip64: the exact HIP calls and argument bytes."""

from __future__ import annotations

import json
import struct

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
