"""Run a campaign's points on its hosts (docs/architecture.md, Data flow):

- ``supervisor``: the session (``Runner``): what is pending, a thread per host loop, signals
  and the stop grace;
- ``host``: one host's loop (lock, builds, layer dumps, reconnect);
- ``groups``: `together` barriers and group ladders across host loops (no host contact);
- ``point``: one point's run (fingerprints, collectors, probe, provenance, storage);
- ``judge``: the verdict, pure; ``record``: each run's record, stored, and the tally;
- ``stop``: the signal that stops the session.
"""

from socketlab.runner.record import Summary, combined_profile, point_label
from socketlab.runner.supervisor import Runner

__all__ = ["Runner", "Summary", "combined_profile", "point_label"]
