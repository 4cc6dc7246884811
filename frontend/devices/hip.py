"""A real AMD GPU through the HIP runtime, driven by hip-python (``from hip import hip``).

Code objects are loaded with ``hipModuleLoadData`` and launched with ``hipModuleLaunchKernel``,
the packed kernarg buffer going through ``extra``. hip-python is imported on first use, so this
module imports fine with neither hip-python nor a HIP runtime installed; using a `HipDevice`
then raises `HipRuntimeError` saying what to install.

Both hip-python generations are supported. What differs (and is handled here):

- ``hipGetDeviceProperties``: 10.x takes the ordinal and returns ``(err, props)``; 7.x takes a
  ``hipDeviceProp_t`` to fill and returns ``(err,)``.
- ``gcnArchName``/``name``: ``str`` in 10.x, NUL-padded ``bytes`` in 7.x.
- ``hipModuleGetFunction``: 7.x rejects a ``str`` kernel name, so names go in as bytes.
- ``hip.has_symbol`` and ``hip.__version__`` only exist in 10.x.
- 10.x finds ``libamdhip64.so`` through ``$ROCM_PATH/lib`` (and ``rocm_sdk``); 7.x only
  through the dynamic loader (``LD_LIBRARY_PATH``, ld.so.conf).

The same in both: the C symbols called (``hipGetDevicePropertiesR0600`` included),
``hipModuleLaunchKernel``'s signature and ``extra`` handling, ``HIP_LAUNCH_PARAM_*`` = 1, 2, 3,
the ``hipMemcpyKind`` enum, ``hipRuntimeGetVersion() -> (err, int)`` and ``hip.HIP_VERSION``.

`hip_runtime_status` reports, without ever raising, what ``hipskinny probe`` needs; and
`check_versions` compares the HIP version hip-python was generated from with the runtime's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PROBE_HINT, DeviceMismatchError, HipRuntimeError, InputTypeError, InputValueError
from .base import Device, DeviceProperties

log = logging.getLogger("hipskinny")

NO_LIBRARY = "no HIP runtime (libamdhip64.so) found: install ROCm, or set ROCM_PATH"
_NO_LIBRARY_DETAIL = (
    " (hip-python 10.x looks in $ROCM_PATH/lib, default /opt/rocm/lib; older hip-python only"
    " through the dynamic loader, so add that directory to LD_LIBRARY_PATH)."
)
_INSTALL_HINT = (
    "install the hip-python release that matches your ROCm, e.g. `pip install \"hip-python==7.2.*\"`"
    " for ROCm 7.2 (`pip index versions hip-python` lists them)."
)

# HIP packs versions as major * 10_000_000 + minor * 100_000 + patch.
_MAJOR, _MINOR = 10_000_000, 100_000

# hip-python is numbered by ROCm release. Up to ROCm 7.2 that equals the HIP major.minor it was
# generated from; hip-python 10.0.x (ROCm 10.0) was generated from HIP 7.15 headers.
_HIP_PYTHON_SERIES: dict[tuple[int, int], str] = {
    (6, 2): "6.2", (6, 3): "6.3", (6, 4): "6.4",
    (7, 0): "7.0", (7, 1): "7.1", (7, 2): "7.2",
    (7, 15): "10.0",
}

# C symbols HipDevice needs; a runtime lacking one is too old for this hip-python.
REQUIRED_SYMBOLS: tuple[str, ...] = (
    "hipRuntimeGetVersion", "hipGetDeviceCount", "hipGetDevicePropertiesR0600", "hipGetDevice",
    "hipSetDevice", "hipMalloc", "hipFree", "hipMemcpyAsync", "hipMemsetAsync", "hipModuleLoadData",
    "hipModuleGetFunction", "hipModuleLaunchKernel", "hipStreamSynchronize", "hipGetErrorString",
    "hipStreamIsCapturing",
)

_ERR_NO_DEVICE = 100  # hipErrorNoDevice
_ERR_CAPTURE_IMPLICIT = 906  # hipErrorStreamCaptureImplicit


# -- hip-python access ---------------------------------------------------------------------------

def _import_hip() -> Any:
    """``from hip import hip``, or a HipRuntimeError saying what to install."""
    try:
        from hip import hip as hip_module
    except ImportError as exc:
        raise HipRuntimeError(
            f"hip-python is not installed or cannot be imported ({exc}): `pip install hip-python`, "
            f"choosing the release that matches your ROCm: {_INSTALL_HINT} {PROBE_HINT}"
        ) from exc
    return hip_module


def _hip_error(message: str, call: str | None = None, code: int | None = None,
               name: str | None = None) -> HipRuntimeError:
    exc = HipRuntimeError(message)
    # Machine-readable copies for callers and tests; the message says the same in words.
    exc.hip_call = call  # type: ignore[attr-defined]
    exc.hip_error_code = code  # type: ignore[attr-defined]
    exc.hip_error_name = name  # type: ignore[attr-defined]
    return exc


def _text(value: Any) -> str:
    """hip-python strings: ``str`` (10.x), NUL-padded ``bytes`` (7.x) or a ``CStr``."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    if not isinstance(value, str):
        value = value.decode() if hasattr(value, "decode") else str(value)
    return value.split("\0", 1)[0]


def _error_text(hip_module: Any, err: Any) -> str:
    try:
        result = hip_module.hipGetErrorString(err)
        return _text(result[1] if isinstance(result, tuple) else result) or "no description"
    except Exception:  # a description is a nicety; never hide the original error behind it
        return "no description"


def _loader_error(call: str, exc: RuntimeError) -> HipRuntimeError:
    text = str(exc)
    if "dlopen" in text:
        return _hip_error(f"{NO_LIBRARY}{_NO_LIBRARY_DETAIL} hip-python said: {text}. {PROBE_HINT}", call)
    if "dlsym" in text:
        return _hip_error(
            f"{call}: the HIP runtime lacks a symbol hip-python needs, so it is older than this "
            f"hip-python expects ({text}); {_INSTALL_HINT} {PROBE_HINT}", call)
    return _hip_error(f"{call} failed inside hip-python: {text}. {PROBE_HINT}", call)


def _call(hip_module: Any, name: str, *args: Any, what: str | None = None) -> Any:
    """Call ``hip.<name>(*args)``; return its outputs or raise HipRuntimeError naming the call."""
    label = what or name
    try:
        result = getattr(hip_module, name)(*args)
    except RuntimeError as exc:  # hip-python's dlopen/dlsym failures
        raise _loader_error(label, exc) from exc
    except ValueError as exc:  # e.g. an error code newer than hip-python's hipError_t enum
        raise _hip_error(f"{label} failed: {exc}. {PROBE_HINT}", label) from exc
    if not isinstance(result, tuple):  # some hip-python builds return a bare hipError_t
        result = (result,)
    err, outputs = result[0], result[1:]
    if int(err) != 0:
        raise _failed(hip_module, label, err)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs


def _failed(hip_module: Any, label: str, err: Any) -> HipRuntimeError:
    err_name = getattr(err, "name", f"hipError {int(err)}")
    return _hip_error(f"{label} failed: {err_name} ({int(err)}): {_error_text(hip_module, err)}. {PROBE_HINT}",
                      label, int(err), err_name)


def _raw_properties(hip_module: Any, ordinal: int) -> Any:
    """hipGetDeviceProperties in either generation's form."""
    try:
        return _call(hip_module, "hipGetDeviceProperties", ordinal)  # 10.x: (err, props)
    except TypeError:  # 7.x: the caller passes the struct to fill, and gets (err,)
        props = hip_module.hipDeviceProp_t()
        _call(hip_module, "hipGetDeviceProperties", props, ordinal)
        return props


def _device_properties(hip_module: Any, ordinal: int) -> DeviceProperties:
    raw = _raw_properties(hip_module, ordinal)
    return DeviceProperties(
        name=_text(raw.name),
        gcn_arch_name=_text(raw.gcnArchName),
        cu_count=int(raw.multiProcessorCount),
        lds_per_workgroup=int(raw.sharedMemPerBlock),
        wave_size=int(raw.warpSize),
        total_memory=int(raw.totalGlobalMem),
    )


# -- versions ------------------------------------------------------------------------------------

def _version_name(version: int) -> str:
    return f"{version // _MAJOR}.{version % _MAJOR // _MINOR}.{version % _MINOR}"


def _hip_python_versions(hip_module: Any) -> tuple[str | None, int | None, str | None]:
    """(hip-python's own version, the HIP version it was generated from, as int and as name)."""
    import hip as hip_package

    version = getattr(hip_package, "__version__", None) or getattr(hip_package, "VERSION", None)
    if version is None:
        try:
            from importlib.metadata import version as dist_version

            version = dist_version("hip-python")
        except Exception:
            version = None
    hip_version = getattr(hip_module, "HIP_VERSION", None) or getattr(hip_package, "HIP_VERSION", None)
    name = getattr(hip_package, "HIP_VERSION_NAME", None)
    return (str(version) if version else None, int(hip_version) if hip_version else None,
            str(name) if name else None)


def hip_python_pin(runtime_version: int) -> str:
    """The ``pip install`` requirement of the hip-python generated for a HIP runtime version."""
    key = (runtime_version // _MAJOR, runtime_version % _MAJOR // _MINOR)
    return f"hip-python=={_HIP_PYTHON_SERIES.get(key, f'{key[0]}.{key[1]}')}.*"


def _compare_versions(bindings: int | None, runtime: int, hip_python: str | None,
                      library: str | None) -> tuple[str, str]:
    """("ok" | "warning" | "error", message) for hip-python's HIP version against the runtime's."""
    hp = f"hip-python {hip_python or '(unknown version)'}"
    where = f" ({library})" if library else ""
    if runtime < _MAJOR:
        return "warning", f"the HIP runtime{where} reports an unrecognised version {runtime}; {PROBE_HINT}"
    if bindings is None:
        return "warning", f"{hp} does not say which HIP version it was generated from; {PROBE_HINT}"
    b_major, b_minor = bindings // _MAJOR, bindings % _MAJOR // _MINOR
    r_major, r_minor = runtime // _MAJOR, runtime % _MAJOR // _MINOR
    if (b_major, b_minor) == (r_major, r_minor):
        return "ok", ""
    pin = hip_python_pin(runtime)
    found = (f"{hp} was generated from HIP {_version_name(bindings)} headers, but the HIP runtime"
             f"{where} is HIP {_version_name(runtime)}")
    series = ("hip-python is numbered by ROCm release, which equals the HIP major.minor up to "
              "ROCm 7.2; hip-python 10.0.x was generated from HIP 7.15")
    if (r_major, r_minor) not in _HIP_PYTHON_SERIES:
        series += (f"; if no hip-python release has that number, take the one generated from the HIP "
                   f"version closest to {r_major}.{r_minor} (`pip index versions hip-python` lists them)")
    if b_major != r_major:
        return "error", (f"{found}: their major versions differ ({b_major} vs {r_major}), and structures "
                         f"and enums change between HIP major versions. Install the hip-python for your "
                         f"runtime: pip install \"{pin}\" ({series}). {PROBE_HINT}")
    return "warning", (f"{found}: same major version, so it should work; if HIP calls misbehave, install "
                       f"the matching release: pip install \"{pin}\" ({series}). {PROBE_HINT}")


def check_versions() -> dict[str, Any]:
    """Compare hip-python's HIP version with the runtime's (``hipRuntimeGetVersion``).

    Different major versions raise `HipRuntimeError` naming the hip-python to install; the same
    major with a different minor logs a warning on the ``hipskinny`` logger. Returns what was found.
    """
    hip_module = _import_hip()
    hip_python, bindings, bindings_name = _hip_python_versions(hip_module)
    runtime = int(_call(hip_module, "hipRuntimeGetVersion"))
    level, message = _compare_versions(bindings, runtime, hip_python, _loaded_library_path())
    if level == "error":
        raise _hip_error(message, "hipRuntimeGetVersion")
    if level == "warning":
        log.warning(message)
    return {
        "hip_python_version": hip_python,
        "hip_python_hip_version": bindings,
        "hip_python_hip_version_name": bindings_name,
        "runtime_version": runtime,
        "runtime_version_name": _version_name(runtime),
        "level": level,
        "message": message or None,
    }


_versions_checked = False
_versions_lock = threading.Lock()


def _check_versions_once() -> None:
    global _versions_checked
    if _versions_checked:
        return
    with _versions_lock:
        if not _versions_checked:
            check_versions()
            _versions_checked = True


# -- runtime status (never raises) ---------------------------------------------------------------

def _loaded_library_path() -> str | None:
    """Where the dynamic loader found libamdhip64.so, once hip-python has opened it."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                if "libamdhip64" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return None


def _missing_symbols(path: str | None) -> list[str] | None:
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path)  # already loaded by hip-python: this only takes a reference
    except OSError:
        return None
    return [name for name in REQUIRED_SYMBOLS if not hasattr(library, name)]


def hip_runtime_status() -> dict[str, Any]:
    """What a bug report needs about HIP, as a JSON-ready dict. Never raises.

    Keys: ``hip_python_installed`` (bool), ``hip_python_version``, ``hip_python_hip_version``
    (int, HIP it was generated from), ``hip_python_hip_version_name``, ``library_found`` (bool),
    ``library_path``, ``missing_symbols`` (list or None), ``runtime_version`` (int),
    ``runtime_version_name``, ``driver_version`` (int), ``device_count`` (int), ``devices``
    (one dict per ordinal: ``ordinal``, ``name``, ``gcn_arch_name``, ``arch``, ``cu_count``,
    ``wave_size``, ``lds_per_workgroup``, ``total_memory``, or ``ordinal`` and ``error``),
    ``problem`` (str or None: why hipskinny cannot use a GPU), ``setup_problem`` (str or None: the
    same without the statements that this machine simply has no GPU -- no HIP runtime and no
    hip-python, a runtime without the library, or one that reports no device --, so what is left is
    a setup to fix) and ``warnings`` (list of str). Unknown values are None.
    """
    status: dict[str, Any] = {
        "hip_python_installed": False,
        "hip_python_version": None,
        "hip_python_hip_version": None,
        "hip_python_hip_version_name": None,
        "library_found": False,
        "library_path": None,
        "missing_symbols": None,
        "runtime_version": None,
        "runtime_version_name": None,
        "driver_version": None,
        "device_count": 0,
        "devices": [],
        "problem": None,
        "setup_problem": None,
        "warnings": [],
    }
    problems: list[str] = []
    no_gpu: list[str] = []            # the statements that there is no GPU here (the last, when any)
    try:
        _fill_status(status, problems, no_gpu)
    except Exception as exc:  # a status report must describe a broken setup, not crash on it
        problems.append(f"unexpected error while probing HIP: {exc!r}")
    status["problem"] = "; ".join(problems + no_gpu) or None
    status["setup_problem"] = "; ".join(problems) or None
    return status


def _fill_status(status: dict[str, Any], problems: list[str], no_gpu: list[str]) -> None:
    try:
        hip_module = _import_hip()
    except HipRuntimeError as exc:
        # hip-python matters where a HIP runtime is installed; without both, there is just no GPU here
        (problems if _runtime_library_installed() else no_gpu).append(str(exc))
        return
    status["hip_python_installed"] = True
    (status["hip_python_version"], status["hip_python_hip_version"],
     status["hip_python_hip_version_name"]) = _hip_python_versions(hip_module)

    # 10.x can ask without raising; 7.x only by trying a call.
    has_symbol = getattr(hip_module, "has_symbol", None)
    if has_symbol is not None and not has_symbol("hipRuntimeGetVersion"):
        no_gpu.append(NO_LIBRARY + _NO_LIBRARY_DETAIL)
        return
    try:
        runtime = int(_call(hip_module, "hipRuntimeGetVersion"))
    except HipRuntimeError as exc:
        if NO_LIBRARY in str(exc):
            no_gpu.append(NO_LIBRARY + _NO_LIBRARY_DETAIL)
        else:
            problems.append(str(exc))
        status["library_found"] = NO_LIBRARY not in str(exc)
        status["library_path"] = _loaded_library_path()
        return
    status["library_found"] = True
    status["library_path"] = path = _loaded_library_path()
    status["runtime_version"] = runtime
    status["runtime_version_name"] = _version_name(runtime)
    missing = status["missing_symbols"] = _missing_symbols(path)
    if missing:
        problems.append(f"the HIP runtime lacks {', '.join(missing)}: it is older than this hip-python "
                        f"expects; {_INSTALL_HINT}")
    try:
        status["driver_version"] = int(_call(hip_module, "hipDriverGetVersion"))
    except HipRuntimeError as exc:
        status["warnings"].append(str(exc))

    level, message = _compare_versions(status["hip_python_hip_version"], runtime,
                                       status["hip_python_version"], path)
    if level == "error":
        problems.append(message)
    elif level == "warning":
        status["warnings"].append(message)

    result = hip_module.hipGetDeviceCount()
    err, count = int(result[0]), int(result[1] or 0)
    if err == _ERR_NO_DEVICE or (err == 0 and count == 0):
        no_gpu.append(_no_gpu_message(path))
        return
    if err != 0:
        problems.append(f"hipGetDeviceCount failed: {getattr(result[0], 'name', err)} ({err}): "
                        f"{_error_text(hip_module, result[0])}")
        return
    status["device_count"] = count
    from ..arch import parse_gcn_arch_name

    for ordinal in range(count):
        try:
            props = _device_properties(hip_module, ordinal)
            status["devices"].append({
                "ordinal": ordinal,
                "name": props.name,
                "gcn_arch_name": props.gcn_arch_name,
                "arch": parse_gcn_arch_name(props.gcn_arch_name)[0] if props.gcn_arch_name else None,
                "cu_count": props.cu_count,
                "wave_size": props.wave_size,
                "lds_per_workgroup": props.lds_per_workgroup,
                "total_memory": props.total_memory,
            })
        except Exception as exc:  # one broken device must not hide the others
            status["devices"].append({"ordinal": ordinal, "error": str(exc)})


def _runtime_library_installed() -> bool:
    """Whether a HIP runtime library is where hip-python or the dynamic loader would find one."""
    dirs = [Path(os.environ.get("ROCM_PATH") or "/opt/rocm") / "lib"]
    dirs += [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    try:
        if any(next(d.glob("libamdhip64.so*"), None) for d in dirs if d.is_dir()):
            return True
        return ctypes.util.find_library("amdhip64") is not None
    except Exception:       # the status describes a machine; it never fails on one
        return False


def _no_gpu_message(library: str | None) -> str:
    where = f" ({library})" if library else ""
    return (f"no AMD GPU found: the HIP runtime{where} reports 0 devices. Check that the amdgpu driver "
            "is loaded, that this user may open /dev/kfd and /dev/dri/renderD* (groups render and "
            "video), and HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES.")


# -- the device ----------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class HipModule:
    """A loaded code object: the runtime's handle, kept with the image it was loaded from."""

    handle: int
    ordinal: int
    image: bytes = field(repr=False)
    raw: Any = field(repr=False, default=None)  # hip-python's ihipModule_t, kept alive with us


@dataclass(frozen=True, eq=False)
class HipFunction:
    """A kernel of a loaded module."""

    handle: int
    name: str
    module: HipModule = field(repr=False)
    raw: Any = field(repr=False, default=None)          # hip-python's handle object: no conversion per launch
    launch_label: str = field(init=False, repr=False)  # built once: launches are the hot path

    def __post_init__(self) -> None:
        object.__setattr__(self, "launch_label", f"hipModuleLaunchKernel({self.name})")


def _device_address(ptr: Any, what: str) -> int:
    if isinstance(ptr, bool) or not isinstance(ptr, int):
        raise InputTypeError(f"{what} must be a device address (int), got {type(ptr).__name__}")
    if ptr < 0:
        raise InputValueError(f"{what} must be a device address, got {ptr}")
    return ptr


def _stream(stream: Any) -> int:
    if type(stream) is not int or stream < 0:
        raise InputTypeError(f"stream must be a HIP stream handle (int, 0 = default stream), got {stream!r}")
    return stream


def _byte_count(nbytes: Any) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise InputTypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    if nbytes < 0:
        raise InputValueError(f"nbytes must be >= 0, got {nbytes}")
    return nbytes


def _host_bytes(obj: Any, nbytes: int, writable: bool) -> memoryview:
    """A flat byte view of a host buffer holding at least ``nbytes`` (writable when copying into it)."""
    role = "destination" if writable else "source"
    if hasattr(obj, "__array_interface__") and hasattr(obj, "view"):
        # numpy: ml_dtypes arrays (bfloat16, fp8) export no buffer format, a uint8 view always works.
        if not obj.flags["C_CONTIGUOUS"]:
            raise InputValueError(f"the host {role} array must be C-contiguous (use numpy.ascontiguousarray)")
        try:
            view = memoryview(obj.reshape(-1).view("u1"))  # reshape of a contiguous array is a view, not a copy
        except (TypeError, ValueError) as exc:  # e.g. object arrays have no bytes to copy
            raise InputTypeError(f"cannot copy a {obj.dtype} array as raw bytes: {exc}") from exc
    else:
        try:
            view = memoryview(obj)
        except TypeError as exc:
            raise InputTypeError(f"the host {role} must support the buffer protocol (bytes, bytearray, "
                                 f"memoryview, numpy array), got {type(obj).__name__}") from exc
        if not view.c_contiguous:
            raise InputValueError(f"the host {role} buffer must be C-contiguous")
        if view.format != "B" or view.ndim != 1:
            try:
                view = view.cast("B")
            except (TypeError, ValueError) as exc:
                raise InputValueError(f"cannot view the host {role} as bytes: {exc}") from exc
    if writable and view.readonly:
        raise InputTypeError(f"the host destination is read-only ({type(obj).__name__}); pass a bytearray, "
                             "a writable memoryview or a writable numpy array")
    if view.nbytes < nbytes:
        raise InputValueError(f"the host {role} holds {view.nbytes} bytes, fewer than the {nbytes} to copy")
    return view


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    try:
        x, y, z = value
    except (TypeError, ValueError) as exc:
        raise InputTypeError(f"{what} must be three ints (x, y, z), got {value!r}") from exc
    # type() is exact on purpose: it also rejects bool, and it is the launch hot path.
    if not (type(x) is int and type(y) is int and type(z) is int
            and 0 < x <= 0xFFFFFFFF and 0 < y <= 0xFFFFFFFF and 0 < z <= 0xFFFFFFFF):
        raise InputValueError(f"{what} must be three ints in [1, 2**32), got {value!r}")
    return x, y, z


class _LaunchConfig:
    """A thread's ``extra`` for hipModuleLaunchKernel: {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}.

    Reused across launches (building it costs more than the rest of the Python side); safe because
    the runtime copies the arguments during the call, and per thread because calls may overlap.
    ``extra`` is the same array already wrapped in hip-python's own argument type when it has one,
    so hip-python does not convert it on every launch.
    """

    def __init__(self, markers: tuple[int, int, int], capacity: int = 512, template: bytes = b"") -> None:
        self.markers = markers
        self.size = ctypes.c_size_t(0)
        self.grow(max(capacity, len(template)))
        if template:
            ctypes.memmove(self.buf, template, len(template))
            self.size.value = len(template)

    def grow(self, capacity: int) -> None:
        self.capacity = capacity
        self.buf = ctypes.create_string_buffer(capacity)
        pointer, size, end = self.markers
        self.config = (ctypes.c_void_p * 5)(pointer, ctypes.addressof(self.buf), size,
                                            ctypes.addressof(self.size), end)
        self.extra = _wrap_extra(self.config)

    def fill(self, kernarg: bytes) -> Any:
        n = len(kernarg)
        if n > self.capacity:
            self.grow(max(n, 2 * self.capacity))
        ctypes.memmove(self.buf, kernarg, n)
        self.size.value = n
        return self.config


def _wrap_extra(config: Any) -> Any:
    """``config`` in hip-python's ``extra`` argument type (10.x and 7.x name it differently), or
    ``config`` itself when this hip-python has no such type (it then converts on every call)."""
    for module in ("rocm.bindings._hip_helpers", "hip._hip_helpers"):
        try:
            helpers = __import__(module, fromlist=["HipModuleLaunchKernel_extra"])
            return helpers.HipModuleLaunchKernel_extra(config)
        except Exception:  # noqa: BLE001 - not this generation's layout: try the next, else the plain array
            continue
    return config


class _StreamObjects:
    """hip-python stream objects by handle, built once each (an int is converted on every call)."""

    def __init__(self, hip_module: Any) -> None:
        self._make = getattr(getattr(hip_module, "ihipStream_t", None), "fromObj", None)
        self._objects: dict[int, Any] = {}
        self.get = self._objects.get

    def add(self, stream: int) -> Any:
        handle = _stream(stream)
        obj: Any = handle
        if self._make is not None:
            try:
                obj = self._make(handle)
            except Exception:  # noqa: BLE001 - fall back to the int, which hip-python converts itself
                obj = handle
        if len(self._objects) > 1024:  # streams come and go: do not keep every handle ever seen
            self._objects.clear()
        self._objects[handle] = obj
        return obj


_streams_by_module: dict[int, _StreamObjects] = {}


def _stream_objects(hip_module: Any) -> _StreamObjects:
    found = _streams_by_module.get(id(hip_module))
    if found is None:
        found = _streams_by_module[id(hip_module)] = _StreamObjects(hip_module)
    return found


_thread_state = threading.local()


class HipDevice(Device):
    """One GPU through the HIP runtime.

    Nothing touches HIP until first use; then hip-python is imported, `check_versions` runs once
    per process and the ordinal is checked against ``hipGetDeviceCount``. HIP's current device is
    per host thread, so every call that depends on it makes this device current for its
    duration and restores the caller's device afterwards (as torch's device guard does); with a
    single visible GPU that device is always current and the round trip is skipped.
    Asynchronous copies read or write the host buffer after they return: keep it alive and
    unmodified until `synchronize`.
    """

    kind = "hip"

    def __init__(self, ordinal: int = 0) -> None:
        if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
            raise InputValueError(f"a HIP device ordinal is an int >= 0, got {ordinal!r}")
        self.ordinal = ordinal
        self._hip: Any = None
        self._props: DeviceProperties | None = None
        self._modules: list[HipModule] = []  # loaded code objects live as long as the device
        self._lock = threading.Lock()
        self._launch_markers: tuple[int, int, int] = (1, 2, 3)
        self._only_device = False  # the runtime sees one GPU: it is always the current one

    def __repr__(self) -> str:
        return f"HipDevice(ordinal={self.ordinal})"

    # setup ------------------------------------------------------------------------------------
    def _ready(self) -> Any:
        if self._hip is not None:
            return self._hip
        with self._lock:
            if self._hip is None:
                hip_module = _import_hip()
                _check_versions_once()
                try:
                    result = hip_module.hipGetDeviceCount()
                except RuntimeError as exc:
                    raise _loader_error("hipGetDeviceCount", exc) from exc
                err, count = int(result[0]), int(result[1] or 0)
                if err == _ERR_NO_DEVICE or (err == 0 and count == 0):
                    raise _hip_error(f"{_no_gpu_message(_loaded_library_path())} {PROBE_HINT}",
                                     "hipGetDeviceCount", err, getattr(result[0], "name", None))
                if err != 0:
                    _call(hip_module, "hipGetDeviceCount")  # raises with the runtime's description
                if self.ordinal >= count:
                    raise _hip_error(f"HIP device {self.ordinal} does not exist: the runtime reports {count} "
                                     f"device(s), ordinals 0..{count - 1}. {PROBE_HINT}", "hipGetDeviceCount")
                self._only_device = count == 1
                self._launch_markers = (
                    int(getattr(hip_module, "HIP_LAUNCH_PARAM_BUFFER_POINTER", 1)),
                    int(getattr(hip_module, "HIP_LAUNCH_PARAM_BUFFER_SIZE", 2)),
                    int(getattr(hip_module, "HIP_LAUNCH_PARAM_END", 3)),
                )
                self._hip = hip_module
        return self._hip

    def _enter(self, hip_module: Any) -> int:
        """Make this device current on the calling thread; return the previous one."""
        if self._only_device:
            return self.ordinal
        previous = int(_call(hip_module, "hipGetDevice"))
        if previous != self.ordinal:
            _call(hip_module, "hipSetDevice", self.ordinal)
        return previous

    def _leave(self, hip_module: Any, previous: int) -> None:
        if previous != self.ordinal:
            hip_module.hipSetDevice(previous)  # best effort: never mask the call's own error

    # properties -------------------------------------------------------------------------------
    @property
    def properties(self) -> DeviceProperties:
        if self._props is None:
            self._props = _device_properties(self._ready(), self.ordinal)
        return self._props

    # memory -----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        nbytes = _byte_count(nbytes)
        hip_module = self._ready()
        previous = self._enter(hip_module)
        try:
            ptr = _call(hip_module, "hipMalloc", nbytes, what=f"hipMalloc({nbytes} bytes)")
        finally:
            self._leave(hip_module, previous)
        return 0 if ptr is None else int(ptr)  # hipMalloc(0) gives NULL

    def free(self, ptr: int) -> None:
        # No device switch: HIP finds the owning device from the address.
        _call(self._ready(), "hipFree", _device_address(ptr, "ptr"))

    def copy_to_device(self, dst: int, src: Any, nbytes: int, stream: int = 0) -> None:
        dst, nbytes, stream = _device_address(dst, "dst"), _byte_count(nbytes), _stream(stream)
        view = _host_bytes(src, nbytes, writable=False)
        hip_module = self._ready()
        previous = self._enter(hip_module)
        try:
            _call(hip_module, "hipMemcpyAsync", dst, view, nbytes,
                  hip_module.hipMemcpyKind.hipMemcpyHostToDevice, stream)
        finally:
            self._leave(hip_module, previous)

    def copy_to_host(self, dst: Any, src: int, nbytes: int, stream: int = 0) -> None:
        src, nbytes, stream = _device_address(src, "src"), _byte_count(nbytes), _stream(stream)
        view = _host_bytes(dst, nbytes, writable=True)
        hip_module = self._ready()
        previous = self._enter(hip_module)
        try:
            _call(hip_module, "hipMemcpyAsync", view, src, nbytes,
                  hip_module.hipMemcpyKind.hipMemcpyDeviceToHost, stream)
        finally:
            self._leave(hip_module, previous)

    def memset(self, ptr: int, value: int, nbytes: int, stream: int = 0) -> None:
        ptr, nbytes, stream = _device_address(ptr, "ptr"), _byte_count(nbytes), _stream(stream)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise InputValueError(f"memset value must be a byte (0..255), got {value!r}")
        hip_module = self._ready()
        previous = self._enter(hip_module)
        try:
            _call(hip_module, "hipMemsetAsync", ptr, value, nbytes, stream)
        finally:
            self._leave(hip_module, previous)

    # code objects and launches ----------------------------------------------------------------
    def load_module(self, image: bytes) -> HipModule:
        if isinstance(image, (bytearray, memoryview)):
            image = bytes(image)  # an immutable copy the caller cannot change under the runtime
        if not isinstance(image, bytes):
            raise InputTypeError(f"a code object image must be bytes, got {type(image).__name__}")
        if not image:
            raise InputValueError("a code object image must not be empty")
        hip_module = self._ready()
        previous = self._enter(hip_module)  # the runtime builds the module for the current device
        try:
            raw = _call(hip_module, "hipModuleLoadData", image)
        finally:
            self._leave(hip_module, previous)
        module = HipModule(handle=int(raw), ordinal=self.ordinal, image=image, raw=raw)
        with self._lock:
            self._modules.append(module)
        return module

    def get_function(self, module: Any, name: str) -> HipFunction:
        if not isinstance(module, HipModule):
            raise InputTypeError(f"expected a module from HipDevice.load_module, got {type(module).__name__}")
        if module.ordinal != self.ordinal:
            raise DeviceMismatchError(f"the module was loaded on hip:{module.ordinal}, not {self.label}")
        if not isinstance(name, str) or not name:
            raise InputTypeError(f"a kernel name must be a non-empty str, got {name!r}")
        hip_module = self._ready()
        # CLR aborts the process (not an error code) when the current device is not the module's.
        previous = self._enter(hip_module)
        try:
            raw = _call(hip_module, "hipModuleGetFunction", module.handle, name.encode(),
                        what=f"hipModuleGetFunction({name!r})")  # bytes: 7.x rejects str names
        finally:
            self._leave(hip_module, previous)
        return HipFunction(handle=int(raw), name=name, module=module, raw=raw)

    def dispatch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
                 kernarg: bytes, shared_mem: int = 0, stream: int = 0) -> None:
        if not isinstance(function, HipFunction):
            raise InputTypeError(f"expected a function from HipDevice.get_function, got {type(function).__name__}")
        if function.module.ordinal != self.ordinal:
            raise DeviceMismatchError(f"{function.name} belongs to hip:{function.module.ordinal}, not {self.label}")
        gx, gy, gz = _dims(grid, "grid")
        bx, by, bz = _dims(block, "block")
        stream = _stream(stream)
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or not 0 <= shared_mem <= 0xFFFFFFFF:
            raise InputValueError(f"shared_mem must be a byte count (int >= 0), got {shared_mem!r}")
        packed = kernarg if isinstance(kernarg, bytes) else bytes(kernarg)
        hip_module = self._hip if self._hip is not None else self._ready()
        launch_config = getattr(_thread_state, "launch_config", None)
        if launch_config is None or launch_config.markers != self._launch_markers:
            launch_config = _thread_state.launch_config = _LaunchConfig(self._launch_markers)
        config = launch_config.fill(packed)
        previous = self._enter(hip_module)
        try:
            _call(hip_module, "hipModuleLaunchKernel", function.handle, gx, gy, gz, bx, by, bz,
                  shared_mem, stream, None, config, what=function.launch_label)
        finally:
            self._leave(hip_module, previous)

    def dispatcher(self, plan: Any) -> Any:
        """``plan`` made ready to dispatch (see `Device.dispatcher`): function, grid, block and shared
        memory are checked once; each thread gets its own kernarg buffer with the hidden
        arguments already in place, and hip-python's argument objects (the ``extra`` array, the
        function, the stream) are built once, so a launch costs one ``pack_into`` and one call."""
        function = plan.function
        if not isinstance(function, HipFunction):
            raise InputTypeError(f"expected a function from HipDevice.get_function, got {type(function).__name__}")
        if function.module.ordinal != self.ordinal:
            raise DeviceMismatchError(f"{function.name} belongs to hip:{function.module.ordinal}, not {self.label}")
        gx, gy, gz = _dims(plan.grid, "grid")
        bx, by, bz = _dims(plan.block, "block")
        shared_mem = plan.shared_mem
        plan.packer.pack_into(bytearray(plan.template), [0] * len(plan.packer.explicit))  # arity, once
        hip_module = self._ready()
        launch_kernel = hip_module.hipModuleLaunchKernel
        handle = function.raw if function.raw is not None else function.handle
        label, template, pack = function.launch_label, plan.template, plan.args.pack_into
        markers, local = self._launch_markers, threading.local()
        streams = _stream_objects(hip_module)

        def buffer() -> Any:
            cfg = local.cfg = _LaunchConfig(markers, len(template), template)
            return cfg

        only_device = self._only_device

        def dispatch(pointers: Any, tail: tuple, stream: int = 0) -> None:
            try:
                cfg = local.cfg
            except AttributeError:           # this thread's first launch of this kernel
                cfg = buffer()
            pack(cfg.buf, 0, *pointers, *tail)
            st = streams.get(stream)
            if st is None:
                st = streams.add(stream)
            if only_device:
                err = launch_kernel(handle, gx, gy, gz, bx, by, bz, shared_mem, st, None, cfg.extra)[0]
            else:
                previous = self._enter(hip_module)
                try:
                    err = launch_kernel(handle, gx, gy, gz, bx, by, bz, shared_mem, st, None, cfg.extra)[0]
                finally:
                    self._leave(hip_module, previous)
            if err:
                raise _failed(hip_module, label, err)

        return dispatch

    def is_capturing(self, stream: int = 0) -> bool:
        """``hipStreamIsCapturing``: is ``stream`` being captured into a HIP graph? A stream that the
        runtime says may not be used while another stream captures (hipErrorStreamCaptureImplicit)
        counts as capturing: nothing may be allocated, copied or synchronized on it either."""
        hip_module = self._ready()
        previous = self._enter(hip_module)
        try:
            result = hip_module.hipStreamIsCapturing(_stream(stream))
        except RuntimeError as exc:  # hip-python's dlopen/dlsym failures
            raise _loader_error("hipStreamIsCapturing", exc) from exc
        except ValueError:   # a failure whose status hip-python could not read: assume the worst
            return True
        finally:
            self._leave(hip_module, previous)
        err = int(result[0])
        if err == _ERR_CAPTURE_IMPLICIT:
            return True
        if err:
            _call(hip_module, "hipStreamIsCapturing", stream)   # raises with the runtime's description
        return int(result[1]) != 0

    def synchronize(self, stream: int = 0) -> None:
        stream = _stream(stream)
        hip_module = self._ready()
        previous = self._enter(hip_module)  # stream 0 is the current device's null stream
        try:
            _call(hip_module, "hipStreamSynchronize", stream)
        finally:
            self._leave(hip_module, previous)
