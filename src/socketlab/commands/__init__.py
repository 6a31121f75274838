"""Subcommands of `orchestrate`; one module each, discovered by socketlab.cli."""
