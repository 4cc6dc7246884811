"""Fixtures for tests that run code against the fake HIP runtime (see tests/fakehip).

To use them in any test module, import them in tests/conftest.py:

    from conftest_fakehip import fakehip_root, fakehip_run, hip_python, hip_python7  # noqa: F401

- ``fakehip_root`` (session): the directory holding ``lib/libamdhip64.so``, built once per session.
- ``hip_python7`` (session): the directory hip-python 7.2.2 is installed in (installed on first use;
  a failed install fails the test, it is never skipped).
- ``hip_python``: parametrizes a test over the hip-python generations, "10" and "7".
- ``fakehip_run(code, env=None, hip_python="10", **kwargs)`` (session): `run_with_fakehip` bound to
  the session's library; returns a `FakeHipRun` (``records, stdout = ...``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakehip import GENERATIONS, FakeHipRun, build_fake_hip, ensure_hip_python7, run_with_fakehip


@pytest.fixture(scope="session")
def fakehip_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fakehip")
    build_fake_hip(root)
    return root


@pytest.fixture(scope="session")
def hip_python7() -> Path:
    return ensure_hip_python7()


@pytest.fixture(params=GENERATIONS, ids=lambda gen: f"hip-python{gen}")
def hip_python(request: pytest.FixtureRequest) -> str:
    if request.param == "7":
        request.getfixturevalue("hip_python7")  # install once, up front, outside any timeout
    return str(request.param)


@pytest.fixture(scope="session")
def fakehip_run(fakehip_root: Path) -> Callable[..., FakeHipRun]:
    def run(code: str, env: dict[str, str | None] | None = None, hip_python: str = "10",
            **kwargs: Any) -> FakeHipRun:
        return run_with_fakehip(code, env, hip_python, root=fakehip_root, **kwargs)

    return run
