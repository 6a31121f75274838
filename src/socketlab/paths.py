"""The only place that knows where the repository's folders are.

Two layouts, one set of names: in a checkout (an editable install, `make setup`) the folders are
the repository's own; an installed wheel carries the same folders inside the package,
``socketlab/_share/`` (setup.py copies them in at build time: collectors/, native/,
experiments/, inventory/, playbooks/, roles/, ansible.cfg and the socketlab.lab collection), so
`orchestrate` finds them through the package, whatever the working directory. What the
toolkit writes goes beside the checkout's folders in a checkout, and under the working
directory (results/) or the user's cache (~/.cache/socketlab) when installed.

Imports nothing from socketlab, so every module (and setup.py) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
#: the data folders of an installed wheel (absent in a checkout)
SHARE = PACKAGE / "_share"
#: True when running from an installed wheel rather than a checkout.
INSTALLED = SHARE.is_dir()
#: Where the data folders are: the checkout's root (src/socketlab/paths.py -> ../../..) or the
#: wheel's share folder. SOCKETLAB_REPO overrides it (a checkout used with an installed wheel).
REPO = Path(os.environ.get("SOCKETLAB_REPO") or (SHARE if INSTALLED else PACKAGE.parents[1]))
PLAYBOOKS = REPO / "playbooks"
ROLES = REPO / "roles"
#: The folder holding ansible_collections/socketlab/lab (the socketlab.lab collection).
COLLECTIONS = REPO
COLLECTION = COLLECTIONS / "ansible_collections" / "socketlab" / "lab"
INVENTORY = REPO / "inventory"
DEFAULT_INVENTORY = INVENTORY / "localhost.yml"
COLLECTORS = REPO / "collectors"
NATIVE = REPO / "native"
EXPERIMENTS = REPO / "experiments"
ANSIBLE_CFG = REPO / "ansible.cfg"
SCHEMAS = PACKAGE / "schemas"
#: What the toolkit writes: beside the checkout, or (installed) where the user works.
_WRITABLE = Path.cwd() if INSTALLED and "SOCKETLAB_REPO" not in os.environ else REPO
#: Where campaigns store their results unless told otherwise.
RESULTS = Path(os.environ.get("SOCKETLAB_RESULTS") or _WRITABLE / "results")
#: Inventory files written by playbooks/provision.yml, one per campaign (git-ignored).
GENERATED_INVENTORY = _WRITABLE / "inventory" / "generated"
#: Controller-side files that are not results (e.g. SSH keys made by provisioning; git-ignored).
CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "socketlab"
    if INSTALLED and "SOCKETLAB_REPO" not in os.environ
    else REPO / ".cache"
)
#: The folders and files a wheel carries in SHARE (setup.py copies them; a checkout has them).
SHARED = (
    "collectors",
    "native",
    "experiments",
    "inventory/localhost.yml",
    "playbooks",
    "roles",
    "ansible.cfg",
    "ansible_collections/socketlab/lab",
)


def ansible_env() -> dict[str, str]:
    """Environment for running ansible-playbook from anywhere, with absolute paths.

    Relative paths in ansible.cfg resolve against the cwd for some settings, so the
    orchestrator passes them explicitly (ansible/ansible#21638).
    """
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(ANSIBLE_CFG),
        ANSIBLE_ROLES_PATH=str(ROLES),
        ANSIBLE_ACTION_PLUGINS=str(PLAYBOOKS / "action_plugins"),
        # ours first, then the user's own (theirs may hold other collections)
        ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(
            [
                str(COLLECTIONS),
                os.path.expanduser("~/.ansible/collections"),
                "/usr/share/ansible/collections",
            ]
        ),
    )
    # An exported ANSIBLE_PYTHON_INTERPRETER=auto* would override ansible.cfg and pick a broken
    # shim.
    if env.get("ANSIBLE_PYTHON_INTERPRETER", "").startswith("auto"):
        del env["ANSIBLE_PYTHON_INTERPRETER"]
    return env


def version() -> str:
    """The project's one version: the collection's galaxy.yml (the wheel's metadata is built
    from it, src/socketlab/_version.py)."""
    for line in (COLLECTION / "galaxy.yml").read_text().splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    raise ValueError(f"{COLLECTION / 'galaxy.yml'}: no version: line")
