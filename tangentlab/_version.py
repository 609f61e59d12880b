"""The package version, in a leaf module that imports nothing (so any module may read it)."""

__version__ = "0.1.0"
