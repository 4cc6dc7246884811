"""`hipskinny probe [--json]`: devices, archs, families, versions, exit status."""

from __future__ import annotations

import json

from hipskinny import registry

SCENARIO = """
import contextlib, io, json, sys
from hipskinny.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["probe", "--json"])
print("PROBE", json.dumps({"code": code, "report": json.loads(out.getvalue())}))
text = io.StringIO()
with contextlib.redirect_stdout(text):
    main(["probe"])
print("TEXT", json.dumps(text.getvalue()))
"""


def _parse(stdout: str) -> tuple[int, dict, str]:
    probe = json.loads(stdout.split("PROBE ", 1)[1].split("\n", 1)[0])
    text = json.loads(stdout.split("TEXT ", 1)[1].split("\n", 1)[0])
    return probe["code"], probe["report"], text


SHIPPED = ["gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"]


def test_probe_without_hip_runtime(fakehip_run):
    code, r, text = _parse(fakehip_run(SCENARIO, with_library=False).stdout)
    assert code == 0 and r["ok"] and r["schema"] == 1
    assert r["devices"] == [] and "libamdhip64.so" in r["no_devices_reason"]
    assert r["shipped_archs"] == SHIPPED
    assert all("gemv" in r["families"][a] for a in SHIPPED)
    assert r["hip"]["hip_python_installed"] and not r["hip"]["library_found"]
    assert "devices: none" in text


def test_probe_text_states_the_no_runtime_reason_once(fakehip_run):
    _, r, text = _parse(fakehip_run(SCENARIO, with_library=False).stdout)
    assert r["no_devices_reason"] == r["hip"]["problem"]
    assert text.count("no HIP runtime (libamdhip64.so) found") == 1, text


def test_demo_on_hip_without_rocm_prints_one_message_and_no_traceback(fakehip_run):
    run = fakehip_run("import sys\nfrom hipskinny.cli import main\nsys.exit(main(['demo', '--device', 'hip:0']))",
                      with_library=False, check=False)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout and run.stderr == ""
    (line,) = run.stdout.splitlines()
    assert line.startswith("demo not run on hip:0: no HIP runtime (libamdhip64.so) found")


def test_probe_with_a_supported_gpu(fakehip_run, hip_python):
    run = fakehip_run(SCENARIO, env={"FAKEHIP_ARCH": "gfx1201", "FAKEHIP_CU_COUNT": "64"}, hip_python=hip_python)
    code, r, text = _parse(run.stdout)
    assert code == 0 and r["ok"] and r["no_devices_reason"] is None
    (dev,) = r["devices"]
    assert dev["arch"] == "gfx1201" and dev["supported"] and dev["cu_count"] == 64
    assert dev["families"] == registry.families("gfx1201") and "gemv" in dev["families"]
    assert dev["fp8_format"] == "ocp" and dev["matrix_unit"] == "wmma"
    assert r["hip"]["runtime_version"] and r["hip"]["hip_python_version"]
    assert "gfx1201" in text and "supported" in text


def test_probe_fails_for_an_unshipped_gpu(fakehip_run):
    run = fakehip_run(SCENARIO, env={"FAKEHIP_DEVICE_COUNT": "2", "FAKEHIP_ARCH": "gfx942:sramecc+:xnack-,gfx90a"})
    code, r, text = _parse(run.stdout)
    assert code == 1 and not r["ok"]
    good, bad = r["devices"]
    assert good["supported"] and good["features"] == ["sramecc+", "xnack-"]
    assert not bad["supported"] and "gfx90a" in bad["error"] and "gfx1201" in bad["error"]
    assert bad["families"] == [] and "NOT SUPPORTED" in text


def test_probe_reports_no_gpu(fakehip_run):
    code, r, _ = _parse(fakehip_run(SCENARIO, env={"FAKEHIP_DEVICE_COUNT": "0"}).stdout)
    assert code == 0 and r["devices"] == [] and "no AMD GPU found" in r["no_devices_reason"]
