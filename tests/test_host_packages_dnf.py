"""The prep step's dnf path (Amazon Linux 2023, RHEL), which can't run here (no dnf): Ansible's
check mode against a pristine host (tests/support/pristine.py: bullseye, python3 3.9, no gcc,
make or perf, as a fresh AL2023 image has none) that Ansible believes is AL2023, from recorded
facts (tests/fixtures/facts/al2023-c8i-metal-48xl.json, written down from the AL2023 user guide)
put in a jsonfile fact cache. The role must pick dnf (not apt), ask it for the RedHat names of
what the host lacks (kernel-tools, perf, kernel-devel-<the recorded kernel>, gcc, make), and
change nothing. A family with no package map is refused in one line. The apt path runs for real
on the rig in tests/test_site_pristine_e2e.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.pristine import changed, pristine_available, pristine_hosts, snapshot

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FACTS = REPO / "tests" / "fixtures" / "facts" / "al2023-c8i-metal-48xl.json"

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(pristine_available() is not None, reason=str(pristine_available())),
]


def recorded(**override) -> dict:
    facts = {k: v for k, v in json.loads(FACTS.read_text()).items() if not k.startswith("_")}
    return {**facts, **override}


def prepare_check(tmp_path: Path, host, facts: dict) -> tuple[subprocess.CompletedProcess, dict]:
    """prepare.yml --check on the host with the given facts cached; (process, json output)"""
    from ansible.plugins.loader import cache_loader

    cache = tmp_path / "facts"
    # Ansible's own cache plugin writes the file, so its format is always the running one's
    cache_loader.get("jsonfile", _uri=str(cache)).set(host.name, facts)
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {host.name: host.inventory_vars()}}}))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
        "ANSIBLE_CACHE_PLUGIN": "jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(cache),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_CALLBACK_FORMAT_PRETTY": "false",
    }
    p = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inv),
            "playbooks/prepare.yml",
            "--check",
            "-e",
            "socketlab_become=true",
            "-e",
            "host_packages_gather_facts=false",
            "-v",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p, results(p.stdout)


RESULT = re.compile(
    r"^(ok|changed|skipping|failed|fatal): \[([^\]]+)\](?: => \(item=(.*?)\))?(?:: FAILED!)? => "
    r"(\{.*\})$"
)


def results(output: str) -> dict:
    """task name -> host -> its result (loops: {"results": [per item]}), from the default
    callback's one-line JSON results (ansible.posix's json callback isn't installed)"""
    out: dict = {}
    name = None
    for line in output.splitlines():
        if line.startswith("TASK ["):
            name = line[6 : line.rindex("]")]
            name = name.split(" : ", 1)[-1]
            continue
        m = RESULT.match(line)
        if not m or name is None:
            continue
        status, host, item, body = m.groups()
        data = json.loads(body)
        data.setdefault("_status", status)
        slot = out.setdefault(name, {})
        if item is not None:
            slot.setdefault(host, {"results": []})["results"].append(data)
        else:
            slot.setdefault(host, {}).update(data)
    return out


def task(out: dict, name: str, host: str) -> dict:
    assert name in out, f"no task {name!r} in the run: {list(out)}"
    return out[name][host]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with pristine_hosts(1, tmp_path_factory.mktemp("dnf")) as pool:
        yield pool.hosts[0]


def test_dnf_path_in_check_mode_on_recorded_al2023_facts(host, tmp_path):
    facts = recorded()
    before = snapshot(host)
    p, out = prepare_check(tmp_path, host, facts)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    picked = task(
        out,
        "Pick the package manager (apt on Debian and Ubuntu, dnf on Amazon Linux and RHEL)",
        host.name,
    )
    assert picked["ansible_facts"]["host_packages_manager_now"] == "dnf", picked
    check = task(out, "Check which tools are there", host.name)
    kernel = facts["ansible_kernel"]
    assert check["kernel"] == kernel
    tools = check["tools"]
    print({name: t["package"] for name, t in tools.items()})
    assert tools["turbostat"]["package"] == "kernel-tools"
    assert tools["perf"]["package"] == "perf"
    assert tools["kernel-headers"]["package"] == f"kernel-devel-{kernel}"
    # the fresh image lacks all of these; their RedHat names, in the tools' order
    want = ["gcc", "make", "perf", "kernel-tools", f"kernel-devel-{kernel}"]
    assert check["missing_packages"] == want, check["missing_packages"]

    apt = task(out, "Install each missing package with apt", host.name)
    # every item skipped (the loop's summary line) or the task skipped whole
    assert apt["_status"] == "skipping" and not apt.get("changed"), apt
    assert all(r["_status"] == "skipping" for r in apt.get("results", [])), apt
    dnf = task(out, "Install each missing package with dnf", host.name)
    asked = [r["item"] for r in dnf["results"]]
    assert asked == want, asked
    for r in dnf["results"]:
        # dnf itself is what this host lacks; that the module was the one asked is the point
        print(f"dnf {r['item']}: {r.get('msg', '')[:120]}")
        if "invocation" in r:
            assert r["invocation"]["module_args"]["name"] == [r["item"]], r["invocation"]
        assert r["ansible_loop_var"] == "item"
    said = task(out, "Say what each tool is, and what could not be installed", host.name)["msg"]
    assert f"kernel-headers: MISSING (package kernel-devel-{kernel})" in said, said
    # check mode: nothing recorded, nothing installed on the host
    record = "Record what was installed (for removal; earlier records are kept in the list)"
    assert task(out, record, host.name)["_status"] == "skipping"
    left = [
        rel
        for rel in changed(before, snapshot(host))
        if not rel.startswith("home/ec2-user/.ansible")
    ]
    assert left == [], left


def test_a_family_without_a_package_map_is_refused_in_one_line(host, tmp_path):
    p, out = prepare_check(
        tmp_path,
        host,
        recorded(ansible_os_family="Alpine", ansible_distribution="Alpine", ansible_pkg_mgr="apk"),
    )
    assert p.returncode != 0
    refused = task(out, "Refuse a distribution family with no package map", host.name)
    print(refused["msg"])
    assert refused["_status"] == "fatal" and refused["msg"] == (
        "host_packages: Alpine (os_family Alpine) has no package map; expected Debian/Ubuntu "
        "(apt) or Amazon Linux/RHEL (dnf), or set host_packages_install=false"
    )
    assert "Check which tools are there" not in out
