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
    code, r, text = _parse(fakehip_run(SCENARIO, env={"FAKEHIP_DEVICE_COUNT": "0"}).stdout)
    assert code == 0 and r["devices"] == [] and "no AMD GPU found" in r["no_devices_reason"]
    assert r["problem"] is None and "problem:" not in text      # a runtime that sees no GPU: no GPU here
    assert "no AMD GPU here" in text and text.count("reports 0 devices") == 1


TOP_LEVEL_KEYS = {"schema", "hipskinny_version", "shipped_archs", "families", "hip", "devices",
                  "no_devices_reason", "emulator", "ok"}


def test_probe_json_schema_keeps_its_keys_and_adds_problem_and_emulator_selection(fakehip_run):
    _, r, _ = _parse(fakehip_run(SCENARIO, with_library=False).stdout)
    assert TOP_LEVEL_KEYS | {"problem"} == set(r)                # keys are only ever added
    assert set(r["emulator"]) == {"available", "archs", "default", "select"}
    assert r["emulator"]["available"] and r["emulator"]["archs"] == SHIPPED


def test_probe_without_gpu_or_rocm_says_no_gpu_and_how_to_select_the_emulator(fakehip_run):
    """Issue 55: a machine without a GPU is no failed setup. The probe said `problem: no HIP runtime
    ... install ROCm`; it now says there is no GPU, that the emulator runs the kernels and how to pick it."""
    code, r, text = _parse(fakehip_run(SCENARIO, with_library=False, env={"HIPSKINNY_DEVICE": None,
                                                                          "HIPSKINNY_EMULATED_ARCH": None}).stdout)
    assert code == 0 and r["ok"] and r["problem"] is None
    assert "problem" not in text, text
    assert "devices: none: no AMD GPU here" in text and "the kernels run on the CPU emulator" in text
    assert r["emulator"]["default"] == "emulator:gfx942" and "used by default here (emulator:gfx942)" in text
    assert "HIPSKINNY_DEVICE=emulator:<arch>" in r["emulator"]["select"]
    assert 'hipskinny.use_device("emulator:<arch>")' in r["emulator"]["select"]
    assert r["emulator"]["select"] in text
    assert r["hip"]["problem"] == r["no_devices_reason"]      # the HIP report itself is unchanged


def test_probe_names_the_emulator_chosen_with_hipskinny_device(fakehip_run):
    _, r, text = _parse(fakehip_run(SCENARIO, with_library=False, env={"HIPSKINNY_DEVICE": "emulator:gfx1201"}).stdout)
    assert r["emulator"]["default"] == "emulator:gfx1201" and "(emulator:gfx1201)" in text


def test_probe_with_a_gpu_has_no_default_emulator(fakehip_run):
    _, r, text = _parse(fakehip_run(SCENARIO, env={"FAKEHIP_ARCH": "gfx942", "HIPSKINNY_DEVICE": None}).stdout)
    assert r["devices"] and r["emulator"]["default"] is None and r["problem"] is None
    assert "used by default" not in text and r["emulator"]["select"] in text


def test_probe_without_hip_python_and_without_rocm_is_no_problem(fakehip_run):
    no_hip_python = "import sys\nsys.modules['hip'] = None\n"     # as if hip-python were not installed
    no_loader_path = "import ctypes.util\nctypes.util.find_library = lambda name: None\n"   # ld.so.conf, too
    _, r, text = _parse(fakehip_run(no_hip_python + no_loader_path + SCENARIO, with_library=False).stdout)
    assert not r["hip"]["hip_python_installed"] and "pip install hip-python" in r["hip"]["problem"]
    assert r["problem"] is None and "problem" not in text and "no AMD GPU here" in text


def test_probe_without_hip_python_where_rocm_is_installed_is_a_problem(fakehip_run):
    no_hip_python = "import sys\nsys.modules['hip'] = None\n"
    _, r, text = _parse(fakehip_run(no_hip_python + SCENARIO).stdout)   # the fake libamdhip64.so is there
    assert r["problem"] == r["hip"]["problem"] and "pip install hip-python" in r["problem"]
    assert f"problem: {r['problem']}" in text and "no AMD GPU here" not in text
    assert text.count("pip install hip-python") == 1


def test_probe_with_a_mismatched_hip_python_and_no_gpu_is_a_problem(fakehip_run):
    run = fakehip_run(SCENARIO, env={"FAKEHIP_RUNTIME_VERSION": "60443482", "FAKEHIP_DEVICE_COUNT": "0"})
    _, r, text = _parse(run.stdout)
    assert "major versions differ" in r["problem"] and "reports 0 devices" not in r["problem"]
    assert r["no_devices_reason"] == r["hip"]["problem"] and r["hip"]["problem"].startswith(r["problem"] + "; ")
    assert f"problem: {r['problem']}" in text and text.count("major versions differ") == 1
    assert text.count("reports 0 devices") == 1 and "no AMD GPU here" not in text
