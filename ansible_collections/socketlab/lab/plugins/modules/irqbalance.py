#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Stop irqbalance for as long as isolation is applied (it would move the IRQs back)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: irqbalance
short_description: Stop irqbalance if it runs, after its state was recorded
description:
  - Finds irqbalance processes by their command name, then stops them through the service
    manager (systemctl where PID 1 is systemd, the SysV script where one exists) or, where
    neither manages it, by signalling exactly the PIDs found.
  - Requires the isolation state file to record whether irqbalance ran, so restore can start it
    again. Supports check mode.
options:
  state_file:
    description: Isolation state file.
    type: path
    required: true
  name:
    description: Process and service name.
    type: str
    default: irqbalance
extends_documentation_fragment:
  - socketlab.lab.service_manager
author: socketlab
"""

EXAMPLES = r"""
- name: Stop irqbalance
  socketlab.lab.irqbalance:
    state_file: /var/lib/socketlab/isolation-host1.json
"""

RETURN = r"""
stopped:
  description: PIDs that were stopped.
  type: list
  returned: always
"""

import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    find_processes,
    load_state,
    service_manager,
    service_manager_option,
    systemctl,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_file=dict(type="path", required=True),
            name=dict(type="str", default="irqbalance"),
            service_manager=service_manager_option(),
        ),
        supports_check_mode=True,
    )
    name = module.params["name"]
    found = find_processes(name)
    if not found:
        module.exit_json(changed=False, stopped=[], msg=f"{name} is not running")
    pids = [pid for pid, _ in found]
    if module.check_mode:
        module.exit_json(changed=True, stopped=pids, msg=f"would stop {name} (PIDs {pids})")
    state = load_state(module.params["state_file"])
    if state is None or name not in state.get("processes", {}):
        module.fail_json(
            msg="{} runs but the isolation state file {} does not record it; "
            "run the isolation_state role first".format(name, module.params["state_file"])
        )
    if service_manager(module.params["service_manager"]) == "systemd":
        systemctl(module, "stop", name)
    elif os.path.exists(f"/etc/init.d/{name}"):
        module.run_command([f"/etc/init.d/{name}", "stop"], check_rc=True)
    else:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and find_processes(name):
        time.sleep(0.1)
    if find_processes(name):
        module.fail_json(msg=f"{name} (PIDs {pids}) still runs 10 s after being stopped")
    module.exit_json(changed=True, stopped=pids, msg=f"stopped {name} (PIDs {pids})")


if __name__ == "__main__":
    main()
