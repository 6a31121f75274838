"""Seed 003's platform benchmark: host vs guest, AMX confirmed from oneDNN's trace.

See docs/platform.md.
"""
