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
  emulator            {available: bool, archs: [str]}
  ok                  bool                     false when a present GPU is not supported
"""

from __future__ import annotations

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
        "emulator": {"available": emulator_available(), "archs": list(SHIPPED_ARCHS) if emulator_available() else []},
        "ok": all(d["supported"] for d in devices),
    }


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
    if hip.get("problem"):
        lines.append(f"problem: {hip['problem']}")
    if not r["devices"]:    # the reason once: it is the problem line when there is one
        reason = r["no_devices_reason"]
        lines.append("devices: none" + ("" if reason == hip.get("problem") else f" ({reason})"))
    for d in r["devices"]:
        state = "supported" if d["supported"] else f"NOT SUPPORTED: {d['error']}"
        lines.append(f"device {d['ordinal']}: {d['name']} [{d['gcn_arch_name']}] {d['cu_count']} CUs — {state}")
        if d["supported"]:
            lines.append(f"  families: {', '.join(d['families'])}; fp8: {d['fp8_format'] or 'none'}; "
                         f"matrix: {d['matrix_unit']}; dot: {', '.join(d['dot_insts'])}")
    emu = r["emulator"]
    lines.append("emulator: " + ("available for " + ", ".join(emu["archs"]) if emu["available"]
                                 else "not part of this installation"))
    return "\n".join(lines)
