"""Daemons `orchestrate` starts on the machine it runs on, as scripts of their own (they import
socketlab, so they are not host-side tools): ``tailor``, the Affinity Tailor's controller loop
(docs/tailor.md)."""
