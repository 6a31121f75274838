#!/usr/bin/python
# Apache-2.0 (see the socketlab repository)
"""Keep /dev/cpu_dma_latency at a value for as long as isolation is applied."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dma_latency
short_description: Start or stop the PM QoS latency holder
description:
  - The kernel honours a /dev/cpu_dma_latency request only while the fd stays open, so a
    process (collectors/dma_latency_hold.py) holds it. Where PID 1 is systemd the holder runs as
    a transient unit (systemd-run), elsewhere as a daemon with a pidfile.
  - Reports "not available on this host" when the device does not exist.
  - Starting requires the isolation state file to record the holder, so restore stops it.
  - Supports check mode.
options:
  state:
    description: V(started) or V(stopped).
    type: str
    choices: [started, stopped]
    default: started
  script:
    description: Path of dma_latency_hold.py on the host.
    type: path
    required: true
  pidfile:
    description: The holder's pidfile.
    type: path
    required: true
  unit:
    description: Transient systemd unit name (used where PID 1 is systemd).
    type: str
    default: socketlab-dma-latency.service
  value:
    description: Latency request in microseconds.
    type: int
    default: 0
  device:
    description: The PM QoS device.
    type: path
    default: /dev/cpu_dma_latency
  python:
    description: Interpreter that runs the holder.
    type: path
    default: /usr/bin/python3
  state_file:
    description: Isolation state file.
    type: path
    required: true
extends_documentation_fragment:
  - socketlab.lab.service_manager
author: socketlab
"""

EXAMPLES = r"""
- name: Hold CPU latency at 0
  socketlab.lab.dma_latency:
    script: /var/lib/socketlab/bin/dma_latency_hold.py
    pidfile: /var/lib/socketlab/dma-latency-host1.pid
    state_file: /var/lib/socketlab/isolation-host1.json
"""

RETURN = r"""
pid:
  description: PID of the holder.
  type: int
  returned: when running
value:
  description: The kernel's current aggregate latency request (µs).
  type: int
  returned: when the device exists
"""

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.socketlab.lab.plugins.module_utils.isolation import (  # noqa: E402
    load_state,
    service_manager,
    service_manager_option,
    systemctl,
)


def status(module, p):
    rc, out, err = module.run_command(
        [p["python"], p["script"], "status", "--pidfile", p["pidfile"], "--device", p["device"]]
    )
    if rc != 0:
        module.fail_json(msg=f"latency holder status failed: {(err or out).strip()}")
    return json.loads(out)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="started", choices=["started", "stopped"]),
            script=dict(type="path", required=True),
            pidfile=dict(type="path", required=True),
            unit=dict(type="str", default="socketlab-dma-latency.service"),
            value=dict(type="int", default=0),
            device=dict(type="path", default="/dev/cpu_dma_latency"),
            python=dict(type="path", default="/usr/bin/python3"),
            state_file=dict(type="path", required=True),
            service_manager=service_manager_option(),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.exists(p["device"]):
        module.exit_json(
            changed=False,
            skipped=True,
            msg="latency holder: not available on this host: {} does not exist "
            "(kernel without PM QoS)".format(p["device"]),
        )
    if not os.path.exists(p["script"]):
        if module.check_mode and p["state"] == "started":
            module.exit_json(changed=True, msg="would install and start the latency holder")
        module.fail_json(msg="latency holder: {} is missing on the host".format(p["script"]))
    systemd = service_manager(p["service_manager"]) == "systemd"
    now = status(module, p)
    if p["state"] == "stopped":
        if not now["running"]:
            module.exit_json(changed=False, msg="latency holder not running")
        if not module.check_mode:
            if systemd:
                systemctl(module, "stop", p["unit"])
            else:
                module.run_command(
                    [p["python"], p["script"], "stop", "--pidfile", p["pidfile"]], check_rc=True
                )
        module.exit_json(changed=True, msg="latency holder stopped (PID {})".format(now["pid"]))
    if now["running"] and now["holds"]:
        module.exit_json(
            changed=False,
            pid=now["pid"],
            value=now.get("value"),
            msg="latency holder runs (PID {}), request {} µs".format(now["pid"], now.get("value")),
        )
    if module.check_mode:
        module.exit_json(changed=True, msg=f"would start the latency holder at {p['value']} µs")
    state = load_state(p["state_file"])
    if state is None or not state.get("holder"):
        module.fail_json(
            msg="the isolation state file {} does not record the latency holder; "
            "run the isolation_state role first".format(p["state_file"])
        )
    base = [p["python"], p["script"]]
    opts = ["--pidfile", p["pidfile"], "--device", p["device"], "--value", str(p["value"])]
    if systemd:
        # --collect: a holder that died (OOM, SIGKILL) leaves no "failed" unit behind whose
        # name the next apply's systemd-run would refuse as "already exists".
        module.run_command(
            [
                "systemd-run",
                "--unit",
                p["unit"],
                "--collect",
                "--description",
                "socketlab: hold /dev/cpu_dma_latency for isolation",
            ]
            + base
            + ["run"]
            + opts,
            check_rc=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not status(module, p)["holds"]:
            time.sleep(0.1)
    else:
        rc, out, err = module.run_command(base + ["start"] + opts)
        if rc != 0:
            module.fail_json(msg=f"latency holder failed to start: {(err or out).strip()}")
    now = status(module, p)
    if not now["holds"]:
        module.fail_json(msg="latency holder started but does not hold {}".format(p["device"]))
    module.exit_json(
        changed=True,
        pid=now["pid"],
        value=now.get("value"),
        msg="latency holder started (PID {}), request {} µs".format(now["pid"], now.get("value")),
    )


if __name__ == "__main__":
    main()
