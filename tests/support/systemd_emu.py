"""An emulated systemd for tests: `systemctl` and `systemd-run`, put first on PATH.

This machine's PID 1 is not systemd, so the isolation modules' systemd paths (AllowedCPUs on
system.slice and init.scope, irqbalance through systemctl, the latency holder as a transient
unit) are driven against this emulation instead. Stdlib only. Unit properties and active states
live in one JSON file in the test's tmp dir; every call is logged there.

It implements exactly the calls the modules make, with systemd's output formats:

    systemctl show -p AllowedCPUs --value UNIT      ranges joined by spaces ("0-1 96-97"), as
                                                    systemd's cpu_set_to_range_string prints them
    systemctl set-property --runtime UNIT AllowedCPUs=SPEC   SPEC comma- or space-separated;
                                                    empty resets (no restriction)
    systemctl is-active UNIT                        "active" rc 0, else the state and rc 3
    systemctl start UNIT / stop UNIT                start runs ExecStart detached and records
                                                    MainPID; stop SIGTERMs MainPID and waits
    systemd-run --unit NAME [--collect] [--description TEXT] CMD...
                                                    really starts CMD (so a held fd is really
                                                    held), MainPID recorded; stopping or exiting
                                                    removes the transient unit

Anything else fails loudly (rc 1, and the call is recorded under "errors"), so a test fails when
a module calls something this emulation does not know.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

UNIT_SUFFIXES = (".service", ".slice", ".scope", ".socket", ".target", ".timer", ".mount")
READ_ONLY = {"show", "is-active"}
STOP_TIMEOUT_S = 10


# ---------------------------------------------------------------- used by the tests
def install(folder: Path, state_file: Path, units: dict[str, dict]) -> Path:
    """Write the initial units and `systemctl` / `systemd-run` wrappers into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps({"units": units, "calls": [], "errors": []}, indent=1))
    for prog in ("systemctl", "systemd-run"):
        wrapper = folder / prog
        wrapper.write_text(
            f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {state_file} {prog} "
            f'"$@"\n'
        )
        wrapper.chmod(0o755)
    return folder


def load(state_file: Path) -> dict:
    return json.loads(state_file.read_text())


def stop_all(state_file: Path) -> None:
    """Stop every process an emulated unit still runs, by its recorded MainPID (test cleanup)."""
    with _locked(state_file) as data:
        for unit in list(data["units"]):
            _stop(data, unit)


# ---------------------------------------------------------------- CPU sets, as systemd has them
def parse_cpu_set(spec: str) -> list[int]:
    """systemd's parse_cpu_set: words separated by whitespace or commas, each N or N-M."""
    cpus: set[int] = set()
    for word in re.split(r"[\s,]+", spec.strip()):
        if not word:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", word)
        if not m or (m[2] and int(m[2]) < int(m[1])):
            raise ValueError(word)
        cpus.update(range(int(m[1]), int(m[2] or m[1]) + 1))
    return sorted(cpus)


def range_string(cpus: list[int]) -> str:
    """systemd's cpu_set_to_range_string: "0-1 96-97" (ranges joined by spaces)."""
    out: list[str] = []
    for cpu in cpus:
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == cpu - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{cpu}"
        elif out and "-" not in out[-1] and int(out[-1]) == cpu - 1:
            out[-1] = f"{out[-1]}-{cpu}"
        else:
            out.append(str(cpu))
    return " ".join(out)


# ---------------------------------------------------------------- the emulation
class _Locked:
    def __init__(self, state_file: Path) -> None:
        self.path = Path(state_file)

    def __enter__(self) -> dict:
        self.lock = open(f"{self.path}.lock", "w")  # noqa: SIM115 - released in __exit__
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.data = json.loads(self.path.read_text())
        return self.data

    def __exit__(self, *exc) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)
        self.lock.close()


def _locked(state_file: Path) -> _Locked:
    return _Locked(state_file)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def _unit_name(name: str) -> str:
    return name if name.endswith(UNIT_SUFFIXES) else f"{name}.service"


def _refresh(data: dict) -> None:
    """A main process that exited on its own: the unit is gone (--collect) or failed."""
    for name, unit in list(data["units"].items()):
        pid = unit.get("MainPID", 0)
        if pid and not _alive(pid):
            unit["MainPID"] = 0
            if unit.get("transient") and unit.get("collect"):
                del data["units"][name]
            else:
                unit["ActiveState"] = "failed"


def _spawn(argv: list[str]) -> int:
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        cwd="/",
    )
    return proc.pid


def _stop(data: dict, name: str) -> None:
    unit = data["units"][name]
    pid = unit.get("MainPID", 0)
    if pid and _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):  # systemd sends SIGKILL after TimeoutStopSec
            os.kill(pid, signal.SIGKILL)
    unit["MainPID"] = 0
    unit["ActiveState"] = "inactive"
    if unit.get("transient"):
        del data["units"][name]


class Unknown(Exception):
    pass


def systemctl(data: dict, args: list[str]) -> tuple[int, str, str]:
    units = data["units"]
    match args:
        case ["show", "-p", "AllowedCPUs", "--value", unit]:
            if unit not in units or "AllowedCPUs" not in units[unit]:
                raise Unknown(f"unit {unit} has no AllowedCPUs in this emulation")
            return 0, units[unit]["AllowedCPUs"] + "\n", ""
        case ["set-property", "--runtime", unit, assignment] if assignment.startswith(
            "AllowedCPUs="
        ):
            if unit not in units or "AllowedCPUs" not in units[unit]:
                raise Unknown(f"unit {unit} has no AllowedCPUs in this emulation")
            spec = assignment.removeprefix("AllowedCPUs=")
            try:
                units[unit]["AllowedCPUs"] = range_string(parse_cpu_set(spec))
            except ValueError:
                return 1, "", f"Failed to parse CPU set: {spec}\n"
            return 0, "", ""
        case ["is-active", unit]:
            state = units.get(_unit_name(unit), {}).get("ActiveState", "inactive")
            return (0 if state == "active" else 3), state + "\n", ""
        case ["stop", unit]:
            name = _unit_name(unit)
            if name not in units:
                return 5, "", f"Failed to stop {name}: Unit {name} not loaded.\n"
            _stop(data, name)
            return 0, "", ""
        case ["start", unit]:
            name = _unit_name(unit)
            if name not in units or not units[name].get("ExecStart"):
                return 5, "", f"Failed to start {name}: Unit {name} not found.\n"
            if units[name].get("ActiveState") != "active":
                units[name].update(MainPID=_spawn(units[name]["ExecStart"]), ActiveState="active")
            return 0, "", ""
    raise Unknown("systemctl " + " ".join(args))


def systemd_run(data: dict, args: list[str]) -> tuple[int, str, str]:
    opts = {"collect": False, "description": ""}
    name = None
    while args and args[0].startswith("--"):
        match args:
            case ["--unit", value, *rest]:
                name, args = value, rest
            case ["--description", value, *rest]:
                opts["description"], args = value, rest
            case ["--collect", *rest]:
                opts["collect"], args = True, rest
            case _:
                raise Unknown("systemd-run option " + args[0])
    if not name or not args:
        raise Unknown("systemd-run without --unit NAME and a command")
    name = _unit_name(name)
    if name in data["units"]:
        return (
            1,
            "",
            (
                f"Failed to start transient service unit: Unit {name} was already loaded or has a "
                "fragment file.\n"
            ),
        )
    data["units"][name] = {
        "transient": True,
        "collect": opts["collect"],
        "Description": opts["description"],
        "ExecStart": args,
        "ActiveState": "active",
        "MainPID": _spawn(args),
    }
    return 0, "", f"Running as unit: {name}\n"


def main(argv: list[str]) -> int:
    state_file, prog, args = Path(argv[0]), argv[1], argv[2:]
    with _locked(state_file) as data:
        data["calls"].append([prog, *args])
        _refresh(data)
        try:
            rc, out, err = (systemctl if prog == "systemctl" else systemd_run)(data, args)
        except Unknown as exc:
            data["errors"].append(f"not emulated: {exc}")
            rc, out, err = 1, "", f"systemd_emu: not emulated: {exc}\n"
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
