"""Shared pytest configuration."""

import gc

import paths

paths.importable()      # test modules import helpers from other families' test modules by name

pytest_plugins = ["conftest_fakehip"]


def pytest_sessionfinish(session, exitstatus):
    # The emulated devices the tests keep alive (module caches) hold millions of small objects, and
    # the interpreter's collections at exit would walk them all, for minutes; nothing after the
    # session needs them collected, so they are moved out of the collector's sight.
    gc.freeze()
