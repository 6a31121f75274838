"""socketlab.topology.model, linked (see ../__init__.py)."""
