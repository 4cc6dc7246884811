"""The capability probe: what a bug report needs, as text or as stable JSON.

Schema (``"schema": 1``; keys are only ever added):
  hipskinny_version   str
  shipped_archs       [str]                    archs with code objects in this install
  families            {arch: [family]}         kernel families shipped per arch
  hip                 {...}                    hip-python / HIP runtime report (see devices.hip)
  devices             [{ordinal, name, gcn_arch_name, arch, features, supported, cu_count,
                        wave_size, lds_per_workgroup, fp8_format, matrix_unit, dot_insts,
                        families, error}]
  no_devices_reason   str | null               why `devices` is empty
  emulator            {available: bool, archs: [str],
                       default: str | null,    the emulator host inputs run on when none is chosen
                                               ("emulator:gfx942"), null when that is a GPU
                       select: str | null}     how to choose one (HIPSKINNY_DEVICE, hipskinny.use_device)
  problem             str | null               what keeps a GPU (or a HIP install) that is here from
                                               working: hip.problem without the statement that this
                                               machine simply has no GPU (no ROCm, or 0 devices), which
                                               is no problem (no_devices_reason says it; the emulator runs)
  ok                  bool                     false when a present GPU is not supported
"""

from __future__ import annotations

import os
from typing import Any

from . import registry
from .arch import SHIPPED_ARCHS, arch_info, parse_gcn_arch_name
from .devices import emulator_available
from .errors import HipSkinnyError
from .version import __version__

SCHEMA = 1


def probe() -> dict[str, Any]:
    """Devices, archs, kernel families and versions, as a JSON-ready dict."""
    from .devices.hip import hip_runtime_status

    status = hip_runtime_status()
    families = {arch: registry.families(arch) for arch in SHIPPED_ARCHS}
    devices = [_device_report(d, families) for d in status.get("devices", [])]
    reason = None
    if not devices:
        reason = status.get("problem") or "no AMD GPU found"
    return {
        "schema": SCHEMA,
        "hipskinny_version": __version__,
        "shipped_archs": list(SHIPPED_ARCHS),
        "families": families,
        "hip": {k: v for k, v in status.items() if k != "devices"},
        "devices": devices,
        "no_devices_reason": reason,
        "emulator": _emulator_report(status),
        "problem": status.get("setup_problem"),
        "ok": all(d["supported"] for d in devices),
    }


SELECT_EMULATOR = 'HIPSKINNY_DEVICE=emulator:<arch> or hipskinny.use_device("emulator:<arch>")'


def _emulator_report(status: dict[str, Any]) -> dict[str, Any]:
    if not emulator_available():
        return {"available": False, "archs": [], "default": None, "select": None}
    # The default device as `devices.current_device` finds it, without creating it.
    chosen = os.environ.get("HIPSKINNY_DEVICE", "").strip()
    if chosen:
        default = chosen if chosen.startswith("emulator:") else None
    elif status.get("device_count", 0) > 0:
        default = None
    else:
        default = "emulator:" + os.environ.get("HIPSKINNY_EMULATED_ARCH", "gfx942")
    return {"available": True, "archs": list(SHIPPED_ARCHS), "default": default, "select": SELECT_EMULATOR}


def _device_report(dev: dict[str, Any], families: dict[str, list[str]]) -> dict[str, Any]:
    gcn = dev.get("gcn_arch_name") or ""
    name, features = parse_gcn_arch_name(gcn) if gcn else ("", ())
    report: dict[str, Any] = {
        "ordinal": dev.get("ordinal"), "name": dev.get("name"), "gcn_arch_name": gcn, "arch": name,
        "features": list(features), "supported": False, "cu_count": dev.get("cu_count"),
        "wave_size": dev.get("wave_size"), "lds_per_workgroup": dev.get("lds_per_workgroup"),
        "fp8_format": None, "matrix_unit": None, "dot_insts": [], "families": [], "error": dev.get("error"),
    }
    try:
        info = arch_info(gcn)
    except HipSkinnyError as e:
        report["error"] = report["error"] or str(e)
        return report
    report.update(supported=True, fp8_format=info.fp8_format, matrix_unit=info.matrix_unit,
                  dot_insts=sorted(info.dot_insts), families=families.get(info.name, []))
    return report


def format_report(r: dict[str, Any]) -> str:
    hip = r["hip"]
    lines = [f"hipskinny {r['hipskinny_version']}",
             f"shipped archs: {', '.join(r['shipped_archs'])}"]
    for arch, fams in r["families"].items():
        lines.append(f"  {arch}: {', '.join(fams) or '(none)'}")
    lines.append(f"hip-python: {hip.get('hip_python_version') or 'not installed'}"
                 f" (generated from HIP {hip.get('hip_python_hip_version_name') or '?'})")
    lines.append(f"HIP runtime: {hip.get('runtime_version_name') or 'not found'}")
    for warning in hip.get("warnings") or []:
        lines.append(f"warning: {warning}")
    problem = r.get("problem")
    if problem:
        lines.append(f"problem: {problem}")
    emu = r["emulator"]
    if not r["devices"]:    # the reason once: what the problem line has said is not repeated
        reason = r["no_devices_reason"] or ""
        if problem and reason.startswith(problem):
            reason = reason[len(problem):].lstrip("; ")
        if problem:
            lines.append("devices: none" + (f" ({reason})" if reason else ""))
        elif emu["available"]:
            runs = "run" if emu.get("default") else "can run"
            lines.append(f"devices: none: no AMD GPU here, which is fine: the kernels {runs} on the CPU emulator "
                         f"(to use a GPU on this machine: {reason})")
        else:
            lines.append(f"devices: none: no AMD GPU here ({reason})")
    for d in r["devices"]:
        state = "supported" if d["supported"] else f"NOT SUPPORTED: {d['error']}"
        lines.append(f"device {d['ordinal']}: {d['name']} [{d['gcn_arch_name']}] {d['cu_count']} CUs — {state}")
        if d["supported"]:
            lines.append(f"  families: {', '.join(d['families'])}; fp8: {d['fp8_format'] or 'none'}; "
                         f"matrix: {d['matrix_unit']}; dot: {', '.join(d['dot_insts'])}")
    if emu["available"]:
        default = f"; used by default here ({emu['default']})" if emu.get("default") else ""
        lines.append(f"emulator: available for {', '.join(emu['archs'])}{default}; select an arch with "
                     f"{emu.get('select') or SELECT_EMULATOR}")
    else:
        lines.append("emulator: not part of this installation")
    return "\n".join(lines)
