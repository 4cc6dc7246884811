"""The shipped code objects: manifest, hash-checked loading, one module per device.

`hsaco/manifest.json` (written by build_scripts) lists every code object with its
sha256. `load(device, family)` reads the file for the device's arch, checks the
hash, parses the metadata and loads it on the device once; later calls return the
cached `Module`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from .arch import SHIPPED_ARCHS
from .codeobject import CodeObject
from .devices.base import Device
from .errors import PROBE_HINT, CodeObjectError, UnsupportedArchError


@lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    try:
        text = resources.files("hipskinny.hsaco").joinpath("manifest.json").read_text()
    except (FileNotFoundError, ModuleNotFoundError) as e:
        raise CodeObjectError("hipskinny's code-object manifest (hipskinny/hsaco/manifest.json) is missing: "
                              "the installation is incomplete; reinstall hipskinny") from e
    return json.loads(text)


def families(arch: str) -> list[str]:
    """Kernel families shipped for an arch (sorted)."""
    return sorted(e["family"] for e in manifest()["code_objects"].values() if e["arch"] == arch)


def entry(arch: str, family: str) -> dict[str, Any]:
    e = manifest()["code_objects"].get(f"{arch}/{family}")
    if e is None:
        if arch not in SHIPPED_ARCHS:
            raise UnsupportedArchError(f"no code objects for {arch}; hipskinny ships "
                                       + ", ".join(SHIPPED_ARCHS))
        raise CodeObjectError(f"kernel family {family!r} is not shipped for {arch}; shipped there: "
                              + ", ".join(families(arch)))
    return e


def launch_flags(arch: str, family: str) -> dict[str, int]:
    """The bits of the ``flags`` argument of a family's kernels, by name, as their source declares them
    (``enum Flags``; the build copies it into the manifest)."""
    return entry(arch, family).get("launch_flags", {})


def launch_facts(arch: str, family: str) -> dict[str, int]:
    """The numbers a family's planner needs (tile sizes, limits), by name, as its source declares them
    (``enum Facts``; the build copies it into the manifest)."""
    return entry(arch, family).get("launch_facts", {})


def read_verified(arch: str, family: str) -> tuple[bytes, dict[str, Any]]:
    """The bytes of a shipped code object, checked against the manifest's sha256."""
    e = entry(arch, family)
    path = resources.files("hipskinny.hsaco").joinpath(e["path"])
    try:
        data = path.read_bytes()
    except FileNotFoundError as e2:
        raise CodeObjectError(f"code object hipskinny/hsaco/{e['path']} is missing; reinstall hipskinny") from e2
    digest = hashlib.sha256(data).hexdigest()
    if digest != e["sha256"]:
        raise CodeObjectError(f"code object hipskinny/hsaco/{e['path']} does not match the manifest "
                              f"(sha256 {digest[:12]}… != {e['sha256'][:12]}…): the file is corrupted or "
                              "stale; reinstall hipskinny")
    return data, e


def check_args(code: CodeObject, e: dict[str, Any]) -> None:
    """The kernels' arguments (name, offset, size, kind) as the manifest lists them, which the ops
    bind by name (`launch.make_launch`), against the code object's own metadata."""
    kernels = {k.name: k for k in code.kernels}
    for k in e["kernels"]:
        have = [[a.param, a.offset, a.size, a.value_kind] for a in kernels[k["name"]].explicit_args]
        if have != k.get("args"):
            raise CodeObjectError(f"kernel {k['name']} in hipskinny/hsaco/{e['path']}: its arguments {have} are "
                                  f"not the manifest's {k.get('args')}; reinstall hipskinny")


@dataclass
class Module:
    """One code object loaded on one device. It refers to its device weakly: `_modules` is keyed
    weakly by the device, and a strong reference from the value would keep every device (its
    memory, its decoded programs) alive for the life of the process."""

    _device: weakref.ref[Device]
    family: str
    code: CodeObject
    handle: Any
    _functions: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> Device:
        device = self._device()
        if device is None:
            raise CodeObjectError(f"the device {self.family} was loaded on is gone")
        return device

    def kernel(self, name: str) -> tuple[Any, Any]:
        """(function handle, kernel metadata) for a kernel of this module."""
        meta = self.code.kernel(name)
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.device.get_function(self.handle, name)
        return fn, meta


_lock = threading.Lock()
_modules: weakref.WeakKeyDictionary[Device, dict[str, Module]] = weakref.WeakKeyDictionary()


def load(device: Device, family: str) -> Module:
    """The module of `family` for the device's arch, loaded once per device."""
    mod = _modules.get(device, {}).get(family)
    if mod is not None:
        return mod
    with _lock:
        per_device = _modules.setdefault(device, {})
        mod = per_device.get(family)
        if mod is None:
            arch = device.arch.name
            data, e = read_verified(arch, family)
            code = CodeObject.parse(data)
            if code.arch != arch:
                raise CodeObjectError(f"hipskinny/hsaco/{arch}/{family}.hsaco targets {code.arch}, not {arch}; "
                                      "reinstall hipskinny. " + PROBE_HINT)
            check_args(code, e)
            mod = Module(weakref.ref(device), family, code, device.load_module(data))
            per_device[family] = mod
    return mod
