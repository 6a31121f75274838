"""socketlab.placement.isolation, linked (see ../__init__.py)."""
