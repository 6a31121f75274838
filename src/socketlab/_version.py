"""The package's version, read from the project's one version (the socketlab.lab collection's
galaxy.yml, through socketlab.paths): pyproject.toml takes the wheel's version from here at
build time, and an installed wheel carries the galaxy.yml it was built from."""

from socketlab.paths import version

VERSION = version()
