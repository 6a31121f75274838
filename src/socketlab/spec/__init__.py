"""Experiment specs: schema, loading, validation, and expansion into run points."""
