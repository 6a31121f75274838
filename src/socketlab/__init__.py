"""socketlab: schedule inference onto a CPU socket's caches, and prove what you measured."""

from socketlab._version import VERSION as __version__  # noqa: F401 - the package's version
