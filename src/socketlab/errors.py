"""One exception hierarchy for the project.

Every error a user can cause is a ``SocketlabError``: the CLI prints its message on one line and
exits 2, with no traceback. Messages name the file, the field and what was expected.
"""


class SocketlabError(Exception):
    """A user-facing error: bad input, an unreachable host, a missing capability."""


class SpecError(SocketlabError):
    """An experiment spec or published-values file is invalid."""


class PlanError(SocketlabError):
    """A plan can't be made from the given facts (e.g. too many housekeeping cores)."""


class HostError(SocketlabError):
    """A host is unknown, unreachable, or lacks what a step needs."""


class CollectError(SocketlabError):
    """A collector failed or its output could not be parsed."""


class StoreError(SocketlabError):
    """The results store is missing, locked, or inconsistent."""


class CloudError(SocketlabError):
    """A cloud (EC2/S3 or compatible) operation was refused or failed."""


class PathError(SocketlabError):
    """A name would make a path leave its folder (socketlab.safepath), or a folder the toolkit
    writes into is a symbolic link."""
