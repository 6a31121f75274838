"""The one process module: ``collectors/_process.py`` (stdlib only: the hosts' agent imports
it there), loaded here by path so that this machine and the hosts run the same file."""

import importlib.util
import sys

from socketlab import paths

_spec = importlib.util.spec_from_file_location(__name__, paths.COLLECTORS / "_process.py")
sys.modules[__name__] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sys.modules[__name__])
