"""The package version (one place: the package and the probe read it; pyproject.toml repeats it)."""

__version__ = "0.1.0"
