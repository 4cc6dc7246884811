"""Which device an op runs on.

Torch tensors on a GPU run on the HIP device they live on. Host inputs (numpy,
torch CPU, host DLPack) run on the *current device*: the one chosen with
`use_device` or the ``HIPSKINNY_DEVICE`` environment variable (``"hip:0"``,
``"emulator:gfx942"``), else HIP device 0 when a GPU is present, else the
emulator (for the arch in ``HIPSKINNY_EMULATED_ARCH``, default gfx942) when it is
available.

The choice is per thread, like HIP's current device: `use_device` and `on_device` in one thread
do not move another thread's host inputs. The default is found on first use and kept (probing
HIP on every call would cost microseconds); ``use_device(None)`` forgets it, so a GPU that
appeared since (a driver loaded, ``HIP_VISIBLE_DEVICES`` changed) is found on the next call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..arch import SHIPPED_ARCHS, arch_info
from ..errors import PROBE_HINT, HipRuntimeError, HipSkinnyError, InputTypeError, InputValueError
from .base import Device, DeviceProperties

__all__ = ["Device", "DeviceProperties", "current_device", "emulator_available", "hip_device", "on_device",
           "selection", "use_device"]

_lock = threading.RLock()
thread_choice = threading.local()        # .selected: this thread's choice (read inline by operands.signature)
default_device: Device | None = None      # found once: probing HIP on every call would cost microseconds
_hip_devices: dict[int, Device] = {}
_emulated: dict[tuple[str, int | None], Device] = {}


def emulator_available() -> bool:
    # Look inside this package, not on the import path: another hipskinny install must not count.
    return (Path(__file__).resolve().parent.parent / "emulator" / "__init__.py").is_file()


def hip_device(ordinal: int = 0) -> Device:
    """The (cached) HipDevice for a GPU ordinal."""
    dev = _hip_devices.get(ordinal)
    if dev is not None:
        return dev
    with _lock:
        return _hip_device_unlocked(ordinal)


def _hip_device_unlocked(ordinal: int) -> Device:
    dev = _hip_devices.get(ordinal)
    if dev is None:
        from .hip import HipDevice

        dev = _hip_devices[ordinal] = HipDevice(ordinal)
    return dev


def emulated_device(arch: str, num_cus: int | None = None) -> Device:
    """The (cached) emulated device of an arch."""
    arch_info(arch)  # unsupported arch -> clear error
    if not emulator_available():
        raise HipSkinnyError("the CPU emulator (hipskinny.emulator) is not part of this installation yet; "
                             "without it kernels can only run on a real AMD GPU. " + PROBE_HINT)
    with _lock:
        return _emulated_unlocked(arch, num_cus)


def _emulated_unlocked(arch: str, num_cus: int | None) -> Device:
    key = (arch, num_cus)
    dev = _emulated.get(key)
    if dev is None:
        from ..emulator import EmulatedDevice  # type: ignore[import-not-found]

        dev = _emulated[key] = EmulatedDevice(arch, num_cus) if num_cus else EmulatedDevice(arch)
    return dev


def _parse_unlocked(spec: str, source: str) -> Device:
    return parse_device(spec, source)   # the lock is re-entrant


_SPEC_FORMS = "'hip:<ordinal>' or 'emulator:<arch>[:<CUs>]' with arch one of " + ", ".join(SHIPPED_ARCHS)


def parse_device(spec: str | Device, source: str = "device") -> Device:
    """The device a spec names: a Device as it is, ``"hip:<ordinal>"`` (``"hip"`` = ``"hip:0"``), or
    ``"emulator:<arch>[:<CUs>]"``. A malformed spec raises `InputValueError` (a ValueError) naming
    ``source`` (the argument, or the environment variable it came from)."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise InputTypeError(f"{source} must be a string ({_SPEC_FORMS}) or a hipskinny Device; got {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    if kind == "hip":
        if rest and not (rest.isdigit() and rest.isascii()):
            raise InputValueError(f"bad {source} {spec!r}: expected 'hip:<ordinal>' (an ordinal >= 0)")
        return hip_device(int(rest or 0))
    if kind == "emulator":
        arch, _, cus = rest.partition(":")
        if not arch:        # the arch decides wave size, matrix units and FP8: no silent default
            raise InputValueError(f"bad {source} {spec!r}: the emulator needs an arch, 'emulator:<arch>' with arch "
                                  "one of " + ", ".join(SHIPPED_ARCHS))
        if cus and not (cus.isdigit() and cus.isascii() and int(cus) > 0):
            raise InputValueError(f"bad {source} {spec!r}: the CU count in 'emulator:<arch>:<CUs>' must be a "
                                  f"positive integer; got {cus!r}")
        return emulated_device(arch, int(cus) if cus else None)
    raise InputValueError(f"bad {source} {spec!r}: expected {_SPEC_FORMS}")


def use_device(spec: str | Device | None) -> Device | None:
    """Select the device this thread's host inputs run on; returns it. ``None`` restores the
    default and makes hipskinny look for it again on the next call."""
    global default_device
    if spec is None:
        thread_choice.selected = None
        with _lock:
            default_device = None
        return None
    thread_choice.selected = parse_device(spec)
    return thread_choice.selected


@contextmanager
def on_device(spec: str | Device) -> Iterator[Device]:
    """Run this thread's host inputs on `spec` inside a ``with`` block, then restore its previous choice."""
    previous = getattr(thread_choice, "selected", None)
    thread_choice.selected = parse_device(spec)
    try:
        yield thread_choice.selected
    finally:
        thread_choice.selected = previous


def selection() -> Device | None:
    """This thread's chosen device, else the default if it has been found: never probes, never raises
    (ops put it in the signature of host calls)."""
    return getattr(thread_choice, "selected", None) or default_device


def current_device() -> Device:
    selected = getattr(thread_choice, "selected", None)
    if selected is not None:
        return selected
    if default_device is not None:
        return default_device
    with _lock:
        if default_device is None:
            _find_default()
        assert default_device is not None
        return default_device


def _find_default() -> None:
    global default_device
    env = os.environ.get("HIPSKINNY_DEVICE")
    if env:
        default_device = _parse_unlocked(env, "HIPSKINNY_DEVICE")
        return
    from .hip import hip_runtime_status

    status = hip_runtime_status()
    if status.get("device_count", 0) > 0:
        default_device = _hip_device_unlocked(0)
        return
    if emulator_available():
        default_device = _emulated_unlocked(os.environ.get("HIPSKINNY_EMULATED_ARCH", "gfx942"), None)
        return
    raise HipRuntimeError("no device to run on: " + (status.get("problem") or "no AMD GPU found")
                          + "; and the CPU emulator is not part of this installation. " + PROBE_HINT)
