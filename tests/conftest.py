"""Shared pytest configuration."""

pytest_plugins = ["conftest_fakehip"]
