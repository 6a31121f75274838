"""The only place that knows where the repository's folders are.

Imports nothing from socketlab, so every module (and the Ansible shims) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Repository root: src/socketlab/paths.py -> ../../..  Overridable for installed copies.
REPO = Path(os.environ.get("SOCKETLAB_REPO", Path(__file__).resolve().parents[2]))
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
#: Where campaigns store their results unless told otherwise.
RESULTS = Path(os.environ.get("SOCKETLAB_RESULTS", REPO / "results"))
SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: Inventory files written by playbooks/provision.yml, one per campaign (git-ignored).
GENERATED_INVENTORY = INVENTORY / "generated"
#: Controller-side files that are not results (e.g. SSH keys made by provisioning; git-ignored).
CACHE = REPO / ".cache"


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
            [str(COLLECTIONS), os.path.expanduser("~/.ansible/collections"),
             "/usr/share/ansible/collections"]),  # fmt: skip
    )
    # An exported ANSIBLE_PYTHON_INTERPRETER=auto* would override ansible.cfg and pick a broken shim.
    if env.get("ANSIBLE_PYTHON_INTERPRETER", "").startswith("auto"):
        del env["ANSIBLE_PYTHON_INTERPRETER"]
    return env
