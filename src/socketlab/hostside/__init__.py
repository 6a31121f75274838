"""The host-side modules as the controller imports them: this package's modules are the files
of the collectors folder (``socketlab.paths.COLLECTORS``: the checkout's, or an installed
wheel's copy), stdlib only and Python 3.9, since they run on target hosts too.

``from socketlab.hostside import _process`` loads collectors/_process.py through Python's own
import system: one module object per file, named ``socketlab.hostside._process``, with nothing
put on sys.path and no module swapped for another in sys.modules. On a host the same files run
as scripts from the tools folder the runner copies (socketlab.execute.tool_files);
there a file finds its siblings beside it. A file the orchestrator imports too and that imports
a sibling does it both ways:

    if __package__:  # imported by the orchestrator, as socketlab.hostside.<name>
        from . import _collector
    else:  # a script on a host: its siblings are beside it
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import _collector
"""

from socketlab import paths

# The package's search path is the collectors folder (the mechanism pkgutil.extend_path uses):
# this folder holds only this file.
__path__ = [str(paths.COLLECTORS)]
