"""oneDNN trace parser and AMX verdicts: ``collectors/platform_onednn.py`` (stdlib only: the host
tool ``collectors/platform_amx.py`` imports it on the hosts), loaded here by path so that the
controller (``orchestrate platform amx --trace``, the report) and the hosts judge a trace with
the same file."""

import importlib.util
import sys

from socketlab import paths

#: the name collectors/platform_amx.py looks its sibling up under: one module object, not two
SIBLING = "socketlab_collectors_platform_onednn"

_spec = importlib.util.spec_from_file_location(__name__, paths.COLLECTORS / "platform_onednn.py")
sys.modules[__name__] = sys.modules[SIBLING] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sys.modules[__name__])
