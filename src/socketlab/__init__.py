"""socketlab: schedule inference onto a CPU socket's caches, and prove what you measured."""

__version__ = "0.1.0"
