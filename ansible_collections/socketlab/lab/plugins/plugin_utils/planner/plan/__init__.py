"""socketlab.plan.isolation, linked (see ../__init__.py)."""
