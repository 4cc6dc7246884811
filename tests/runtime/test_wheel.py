"""The wheel carries every shipped code object and imports with no compiler and no ROCm."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import paths
import pytest

REPO = paths.REPO


def test_wheel_contains_code_objects_and_imports_without_rocm(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("hipskinny-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # What a GPU user downloads: code objects, the emulator's instruction tables, the manifest, Python.
    by_kind: dict[str, int] = {}
    for info in zipfile.ZipFile(wheel).infolist():
        kind = info.filename.rsplit(".", 1)[-1] if "." in info.filename.rsplit("/", 1)[-1] else "other"
        by_kind[kind] = by_kind.get(kind, 0) + info.compress_size
    print(f"wheel {wheel.stat().st_size / 1e6:.1f} MB: " +
          ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    assert wheel.stat().st_size <= 25e6, by_kind
    manifest = json.loads((REPO / "hsaco" / "manifest.json").read_text())
    for entry in manifest["code_objects"].values():
        assert f"hipskinny/hsaco/{entry['path']}" in names
        assert f"hipskinny/hsaco/{entry['instructions']}" in names
    assert "hipskinny/hsaco/manifest.json" in names and "hipskinny/hsaco/__init__.py" in names
    assert {e["arch"] for e in manifest["code_objects"].values()} == {
        "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"}
    assert not any(n.startswith(("kernels/", "tests/", "build_scripts/")) for n in names)
    # vLLM finds the plugin through the wheel's entry points (hipskinny.integrations.vllm).
    assert "hipskinny/integrations/vllm.py" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    plugins = zipfile.ZipFile(wheel).read(entry_points).decode().split("[vllm.general_plugins]", 1)[1]
    assert plugins.split("[", 1)[0].split() == ["hipskinny", "=", "hipskinny.integrations.vllm:register"]
    # Import from the unpacked wheel alone, with no HIP library reachable.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    out = subprocess.run(
        [sys.executable, "-c", "import hipskinny, hipskinny.registry as r; print(hipskinny.__file__, "
         "len(r.read_verified('gfx1151', 'gemv')[0]))"],
        env={"PYTHONPATH": str(site), "ROCM_PATH": str(tmp_path / "no-rocm"), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120)
    path, size = out.stdout.split()
    assert path.startswith(str(site)) and int(size) > 1000


def _setup_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Set up", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_test_command_keeps_an_installed_torch_in_the_supported_range():
    """README's test command must not replace a user's torch (a ROCm build) with PyPI's: no pin, and
    the test extra's torch range, stated in pyproject.toml, admits the torch installed here."""
    import torch
    from packaging.requirements import Requirement
    from packaging.version import Version

    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib (Python 3.11+)")

    install, test = _setup_commands()
    assert test.startswith("pip install '.[test]'") and "torch" not in test, test
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for extra in ("torch", "test"):
        (req,) = [Requirement(r) for r in project["optional-dependencies"][extra] if Requirement(r).name == "torch"]
        assert req.specifier and req.specifier.contains(Version(torch.__version__.split("+")[0])), req
    # CI runs these exact commands.
    ci = (REPO / ".ci" / "run").read_text()
    for command in (install, test):
        assert command.replace("pip install", "pip install -q") in ci, command
