"""The one ActionModule behind playbooks/action_plugins/socketlab_ec2_*.py.

Each plugin file is `ActionModule = action_module(<entry point of socketlab.cloud.actions>)`.
It runs in the ansible-playbook process on the controller; nothing is copied to or run on a
target host. A SocketlabError becomes the task's one-line `msg`, not a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from socketlab.errors import SocketlabError

Entry = Callable[[dict[str, Any], Callable[[str], None]], dict[str, Any]]

display = Display()


def action_module(entry: Entry) -> type[ActionBase]:
    class ActionModule(ActionBase):
        TRANSFERS_FILES = False
        _requires_connection = False

        def run(self, tmp=None, task_vars=None):
            result = super().run(tmp, task_vars)
            lines: list[str] = []

            def log(msg: str) -> None:
                lines.append(msg)
                display.display(f"socketlab: {msg}")

            try:
                result.update(entry(dict(self._task.args), log))
            except SocketlabError as exc:
                result.update(failed=True, msg=str(exc))
            result["log"] = lines
            return result

    ActionModule.__doc__ = f"Runs socketlab.cloud.actions.{entry.__name__} on the controller."
    return ActionModule
