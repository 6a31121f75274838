"""The layer package's user errors (one line, exit 2 through the CLI)."""

from socketlab.errors import SocketlabError


class LayerError(SocketlabError):
    """A bad dump, checkpoint or layer argument: names the file, the field and what is expected."""
