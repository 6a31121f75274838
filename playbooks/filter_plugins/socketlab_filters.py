"""Shim: the filters live in socketlab.ansible_plugins.filters (installed with the package)."""

from socketlab.ansible_plugins.filters import FilterModule  # noqa: F401
