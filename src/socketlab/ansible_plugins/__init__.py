"""Ansible plugins' code; playbooks/*_plugins/ hold thin shims that import from here."""
