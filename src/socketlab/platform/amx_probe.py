"""The AMX probe (workloads under ONEDNN_VERBOSE, one verdict per run): ``collectors/
platform_amx.py``, the host tool experiments/platform.yaml runs on every machine (stdlib only;
the workload children need torch), loaded here by path so that ``orchestrate platform amx`` on
this machine runs the same file: ``probe()``, ``runs()``, ``cpu_flags()``, ``CONTROL_ISA``."""

import importlib.util
import sys

from socketlab import paths
from socketlab.platform import onednn  # noqa: F401 - first: the tool finds its sibling loaded

_spec = importlib.util.spec_from_file_location(__name__, paths.COLLECTORS / "platform_amx.py")
sys.modules[__name__] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sys.modules[__name__])
