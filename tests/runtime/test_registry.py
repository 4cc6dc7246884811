"""The shipped manifest, hash-checked loading, one module per device."""

import hashlib
import json
import shutil

import pytest

from hipskinny import CodeObjectError, UnsupportedArchError, registry
from hipskinny.arch import ARCHS, SHIPPED_ARCHS
from hipskinny.devices.base import Device, DeviceProperties


class RecordingDevice(Device):
    """A device that only records module loads and function lookups."""

    kind = "recording"

    def __init__(self, arch: str) -> None:
        self._props = DeviceProperties("rec", arch, 4, 65536, 64, 1 << 30)
        self.loaded: list[bytes] = []
        self.lookups: list[str] = []

    @property
    def properties(self):
        return self._props

    def alloc(self, nbytes): raise NotImplementedError
    def free(self, ptr): raise NotImplementedError
    def copy_to_device(self, dst, src, nbytes, stream=0): raise NotImplementedError
    def copy_to_host(self, dst, src, nbytes, stream=0): raise NotImplementedError
    def memset(self, ptr, value, nbytes, stream=0): raise NotImplementedError
    def dispatch(self, function, grid, block, kernarg, shared_mem=0, stream=0): raise NotImplementedError
    def synchronize(self, stream=0): pass

    def load_module(self, image):
        self.loaded.append(bytes(image))
        return len(self.loaded)

    def get_function(self, module, name):
        self.lookups.append(name)
        return (module, name)


def test_every_arch_ships_gemv():
    for arch in SHIPPED_ARCHS:
        assert "gemv" in registry.families(arch)
    assert registry.manifest()["archs"] == list(SHIPPED_ARCHS)


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_load_once_per_device_and_function_cache(arch):
    dev = RecordingDevice(arch)
    mod = registry.load(dev, "gemv")
    assert registry.load(dev, "gemv") is mod and len(dev.loaded) == 1
    data, entry = registry.read_verified(arch, "gemv")
    assert dev.loaded[0] == data and hashlib.sha256(data).hexdigest() == entry["sha256"]
    fn, meta = mod.kernel("gemv_f16_r4")
    assert mod.kernel("gemv_f16_r4")[0] is fn and dev.lookups == ["gemv_f16_r4"]
    assert meta.name == "gemv_f16_r4" and meta.wavefront_size == ARCHS[arch].wave_size
    other = RecordingDevice(arch)
    assert registry.load(other, "gemv") is not mod and len(other.loaded) == 1


def test_unknown_kernel_and_family_are_clear_errors():
    mod = registry.load(RecordingDevice("gfx1201"), "gemv")
    with pytest.raises(CodeObjectError, match="no kernel 'gemv_f32_r4'.*gemv_bf16_r1"):
        mod.kernel("gemv_f32_r4")
    with pytest.raises(CodeObjectError,
                       match="not shipped for gfx1201; shipped there: fp8_linear, fp8_linear_splitk, fused_moe, gemv"):
        registry.entry("gfx1201", "nonexistent")
    with pytest.raises(UnsupportedArchError, match="gfx942, gfx950"):
        registry.entry("gfx90a", "gemv")


@pytest.fixture
def copied_hsaco(tmp_path, monkeypatch):
    """The shipped hsaco/ copied to a temp dir that the registry reads instead."""
    from importlib import resources

    src = resources.files("hipskinny.hsaco")
    dst = tmp_path / "hsaco"
    shutil.copytree(str(src), dst)
    monkeypatch.setattr(registry.resources, "files", lambda pkg: dst)
    registry.manifest.cache_clear()
    yield dst
    registry.manifest.cache_clear()


def test_corrupted_code_object_is_refused(copied_hsaco):
    path = copied_hsaco / "gfx942" / "gemv.hsaco"
    data = bytearray(path.read_bytes())
    data[0x2000] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CodeObjectError, match="does not match the manifest"):
        registry.load(RecordingDevice("gfx942"), "gemv")


def test_missing_code_object_and_manifest(copied_hsaco):
    (copied_hsaco / "gfx950" / "gemv.hsaco").unlink()
    with pytest.raises(CodeObjectError, match="missing; reinstall"):
        registry.read_verified("gfx950", "gemv")
    (copied_hsaco / "manifest.json").unlink()
    registry.manifest.cache_clear()
    with pytest.raises(CodeObjectError, match="manifest"):
        registry.families("gfx950")


def test_code_object_for_the_wrong_arch_is_refused(copied_hsaco):
    manifest = json.loads((copied_hsaco / "manifest.json").read_text())
    # Point gfx1151's entry at gfx1100's (valid, correctly hashed) code object.
    manifest["code_objects"]["gfx1151/gemv"].update(
        {k: manifest["code_objects"]["gfx1100/gemv"][k] for k in ("path", "sha256")})
    (copied_hsaco / "manifest.json").write_text(json.dumps(manifest))
    registry.manifest.cache_clear()
    with pytest.raises(CodeObjectError, match="targets gfx1100, not gfx1151"):
        registry.load(RecordingDevice("gfx1151"), "gemv")


def test_every_shipped_kernel_argument_has_its_source_name():
    """The ops bind kernel arguments by name: every explicit argument of every shipped kernel is named
    in the manifest (the build keeps names: -fno-discard-value-names) and its pointers come first."""
    for e in registry.manifest()["code_objects"].values():
        for k in e["kernels"]:
            names = [a[0] for a in k["args"]]
            assert all(names) and len(set(names)) == len(names), (k["name"], names)
            kinds = [a[3] for a in k["args"]]
            assert kinds == sorted(kinds, key=lambda kind: kind != "global_buffer"), (k["name"], kinds)


def test_arguments_unlike_the_manifest_are_refused(copied_hsaco):
    """A code object whose metadata names, places or sizes an argument otherwise than the manifest
    (a stale or mixed-up install) is refused at load, before any call binds a name."""
    manifest = json.loads((copied_hsaco / "manifest.json").read_text())
    kernel = manifest["code_objects"]["gfx942/gemv"]["kernels"][0]
    kernel["args"][0][0], kernel["args"][1][0] = kernel["args"][1][0], kernel["args"][0][0]
    (copied_hsaco / "manifest.json").write_text(json.dumps(manifest))
    registry.manifest.cache_clear()
    with pytest.raises(CodeObjectError, match=f"kernel {kernel['name']} .* not the manifest's"):
        registry.load(RecordingDevice("gfx942"), "gemv")
