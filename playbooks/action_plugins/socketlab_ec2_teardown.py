"""Action plugin: a controller-side shim over socketlab.cloud.actions.teardown (see that module).

It runs in the ansible-playbook process on the controller, so it may import socketlab; nothing
is copied to or run on a target host.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        from socketlab.cloud.actions import teardown
        from socketlab.errors import SocketlabError

        lines: list[str] = []

        def log(msg: str) -> None:
            lines.append(msg)
            display.display(f"socketlab: {msg}")

        try:
            result.update(teardown(dict(self._task.args), log))
        except SocketlabError as exc:
            result.update(failed=True, msg=str(exc))
        result["log"] = lines
        return result
