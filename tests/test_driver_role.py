"""roles/sram_driver through playbooks/sram_driver.yml on localhost. This kernel
has no module support (no /proc/modules): the role says "not available" and changes nothing.
The build, record, load, reload and restore paths run on a faked module directory: a
/proc/modules file, /lib/modules/<release>/build pointing at the Debian kernel headers (the
build is real Kbuild), /sys/module parameters, and insmod/rmmod stand-ins that log their
arguments and edit the fake /proc/modules and /sys/module the way the kernel would."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
HEADERS = sorted(Path("/usr/src").glob("linux-headers-*-amd64"))

INSMOD = """#!/bin/sh
# insmod stand-in: log, then show the module as loaded with its parameters
echo "insmod $*" >> "{log}"
ko=$1; shift
grep -q '^pseudo_lock_sram ' "{proc}" && {{ echo "insmod: File exists" >&2; exit 1; }}
test -f "$ko" || {{ echo "insmod: $ko: not found" >&2; exit 1; }}
echo "pseudo_lock_sram 16384 0 - Live 0x0" >> "{proc}"
mkdir -p "{sys}/pseudo_lock_sram/parameters"
for kv in "$@"; do echo "${{kv#*=}}" > "{sys}/pseudo_lock_sram/parameters/${{kv%%=*}}"; done
touch "{dev}"
"""
RMMOD = """#!/bin/sh
echo "rmmod $*" >> "{log}"
grep -q '^pseudo_lock_sram ' "{proc}" || {{ echo "rmmod: not loaded" >&2; exit 1; }}
grep -v '^pseudo_lock_sram ' "{proc}" > "{proc}.new"; mv "{proc}.new" "{proc}"
rm -rf "{sys}/pseudo_lock_sram" "{dev}"
"""


def playbook(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
    }
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "inventory/localhost.yml",
            "playbooks/sram_driver.yml",
            "-e",
            f"sram_driver_state_file={tmp_path / 'state.json'}",
            "-e",
            f"sram_driver_build_dir={tmp_path / 'build'}",
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_no_module_support_here_is_reported_and_nothing_changes(tmp_path):
    """This kernel: /proc/modules missing (CONFIG_MODULES off). Real host paths."""
    if Path("/proc/modules").exists():
        pytest.skip("this kernel has module support; the faked-directory tests cover it")
    p = playbook(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not available on this host: kernel without module support" in p.stdout
    assert not (tmp_path / "state.json").exists() and not (tmp_path / "build").exists()


@pytest.fixture
def fake_kernel(tmp_path):
    if not HEADERS:
        pytest.skip("no /usr/src/linux-headers-*-amd64 (apt-get install linux-headers-amd64)")
    root = tmp_path / "fake"
    release = HEADERS[-1].name.removeprefix("linux-headers-")
    (root / "lib/modules" / release).mkdir(parents=True)
    (root / "lib/modules" / release / "build").symlink_to(HEADERS[-1])
    (root / "sys/module").mkdir(parents=True)
    (root / "dev").mkdir()
    proc = root / "proc_modules"
    proc.write_text("ext4 1 0 - Live 0x0\n")
    paths = {
        "log": root / "calls.log",
        "proc": proc,
        "sys": root / "sys/module",
        "dev": root / "dev/pseudo_lock",
    }
    for name, text in (("insmod", INSMOD), ("rmmod", RMMOD)):
        script = root / name
        script.write_text(text.format(**paths))
        script.chmod(0o755)
    args = [
        "-e",
        f"sram_driver_proc_modules={proc}",
        "-e",
        f"sram_driver_modules_root={root / 'lib/modules'}",
        "-e",
        f"sram_driver_sys_module={root / 'sys/module'}",
        "-e",
        f"sram_driver_device={paths['dev']}",
        "-e",
        f"sram_driver_kernel_release={release}",
        "-e",
        f"sram_driver_insmod={root / 'insmod'}",
        "-e",
        f"sram_driver_rmmod={root / 'rmmod'}",
        "-e",
        "sram_driver_install_headers=false",
    ]
    return paths, args


def calls(paths) -> list[str]:
    log = paths["log"]
    return log.read_text().splitlines() if log.exists() else []


def test_build_load_reload_and_restore_on_a_faked_module_directory(tmp_path, fake_kernel):
    """present: builds the .ko for real, records "not loaded", loads with the ways, sets the
    mode; present again with other ways: unload + load, the record unchanged; absent: unload,
    record removed; absent again: nothing to restore."""
    paths, args = fake_kernel
    p = playbook(tmp_path, *args, "-e", "sram_driver_l2_ways=12")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert (tmp_path / "build/pseudo_lock_sram.ko").is_file()
    record = json.loads((tmp_path / "state.json").read_text())
    assert record["loaded"] is False and record["params"] == {}
    assert calls(paths) == [
        f"insmod {tmp_path / 'build/pseudo_lock_sram.ko'} l2_ways=12 l3_ways=0 l3_io_ways=0"
    ]
    assert oct(paths["dev"].stat().st_mode & 0o777) == "0o660"

    p = playbook(tmp_path, *args, "-e", "sram_driver_l2_ways=12")
    assert p.returncode == 0, p.stdout[-4000:]
    assert len(calls(paths)) == 1  # same ways: nothing reloaded

    p = playbook(tmp_path, *args, "-e", "sram_driver_l2_ways=14")
    assert p.returncode == 0, p.stdout[-4000:]
    assert calls(paths)[1:] == [
        "rmmod pseudo_lock_sram",
        f"insmod {tmp_path / 'build/pseudo_lock_sram.ko'} l2_ways=14 l3_ways=0 l3_io_ways=0",
    ]
    assert json.loads((tmp_path / "state.json").read_text()) == record  # first state kept

    p = playbook(tmp_path, *args, "-e", "sram_driver_state=absent")
    assert p.returncode == 0, p.stdout[-4000:]
    assert calls(paths)[3:] == ["rmmod pseudo_lock_sram"]
    assert "pseudo_lock_sram" not in paths["proc"].read_text()
    assert not (tmp_path / "state.json").exists()

    p = playbook(tmp_path, *args, "-e", "sram_driver_state=absent")
    assert p.returncode == 0 and "nothing to restore" in p.stdout
    assert len(calls(paths)) == 4


def test_a_module_loaded_before_is_reloaded_with_its_old_parameters(tmp_path, fake_kernel):
    paths, args = fake_kernel
    old = tmp_path / "old.ko"  # an earlier build, loaded before the role ran
    old.write_bytes(b"")
    subprocess.run(
        [str(paths["proc"].parent / "insmod"), str(old), "l2_ways=10", "l3_ways=2", "l3_io_ways=0"],
        check=True,
    )
    p = playbook(tmp_path, *args, "-e", "sram_driver_l2_ways=12")
    assert p.returncode == 0, p.stdout[-4000:]
    record = json.loads((tmp_path / "state.json").read_text())
    assert record["loaded"] is True
    assert record["params"] == {"l2_ways": 10, "l3_ways": 2, "l3_io_ways": 0}
    p = playbook(tmp_path, *args, "-e", "sram_driver_state=absent")
    assert p.returncode == 0, p.stdout[-4000:]
    assert calls(paths)[-1] == (
        f"insmod {tmp_path / 'build/pseudo_lock_sram.ko'} l2_ways=10 l3_ways=2 l3_io_ways=0"
    )


def test_missing_headers_are_reported(tmp_path, fake_kernel):
    paths, args = fake_kernel
    p = playbook(tmp_path, *args, "-e", "sram_driver_kernel_release=0.0.0-none")
    assert p.returncode == 0, p.stdout[-4000:]
    assert "not available on this host: no kernel headers for 0.0.0-none" in p.stdout
    assert calls(paths) == [] and not (tmp_path / "state.json").exists()
