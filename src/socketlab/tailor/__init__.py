"""The CPU-set controller (docs/tailor.md), pure: ``controller`` decides demand-sized CPU sets
from usage samples; ``simulator`` replays a demand trace under it and two other policies. The
host side that applies the sets is socketlab.daemons.tailor."""
