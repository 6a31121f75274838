"""The socketlab.lab collection as a user gets it: built with ansible-galaxy, installed into a
collections path of its own, used from an empty folder outside the checkout with no ansible.cfg.

- Every link in the collection's source (to collectors/, native/ and src/) resolves inside the
  repository, and the built tarball holds plain files only (the build copies them in).
- ansible-test sanity on the installed collection: the tests that run offline (the others
  make a virtual environment per test and download pip's bootstrap script from
  ci-files.testing.ansible.com; pep8, yamllint and the module docs are covered by ruff,
  ansible-lint and the ansible-doc test here).
- No plugin imports the socketlab package: none is in the tarball's sources, and the playbook
  below runs with a `socketlab` on PYTHONPATH that fails every import.
- A three-line playbook (isolate, verify, restore by FQCN) against a network-namespace sshd host
  changes the knobs and puts every one of them back.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from socketlab import paths
from tests.test_isolation_playbooks import (  # noqa: F401 - flipped_vm_knobs is a fixture
    WORKQUEUE,
    assert_same_knobs,
    flipped_vm_knobs,
    knob_snapshot,
    recap,
)

BIN = Path(sys.executable).parent
#: the sanity tests that need no per-test virtual environment (so no download)
OFFLINE_SKIPPED = (
    "ansible-doc",
    "import",
    "pep8",
    "pylint",
    "runtime-metadata",
    "validate-modules",
    "yamllint",
)
THREE_LINES = """\
- ansible.builtin.import_playbook: socketlab.lab.isolate
- ansible.builtin.import_playbook: socketlab.lab.verify
- ansible.builtin.import_playbook: socketlab.lab.restore
"""


def clean_env(collections: Path, **extra: str) -> dict[str, str]:
    """The environment of a user with no socketlab checkout: no ANSIBLE_* from ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), **extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(tarball, collections path): built from the checkout, installed from the tarball, both
    with the working directory an empty folder and no ansible.cfg in reach."""
    root = tmp_path_factory.mktemp("collection")
    empty = root / "empty"
    empty.mkdir()
    collections = root / "collections"
    env = clean_env(collections)
    started = time.monotonic()
    build = subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "build",
            "--output-path",
            str(root),
            str(paths.COLLECTION),
        ],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = root.glob("socketlab-lab-*.tar.gz")
    install = subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "-p",
            str(collections),
            str(tarball),
        ],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    print(
        f"built {tarball.name} ({tarball.stat().st_size} B) and installed it in "
        f"{time.monotonic() - started:.1f} s"
    )
    return tarball, collections


def test_every_link_resolves_inside_the_repository():
    links = [p for p in paths.COLLECTION.rglob("*") if p.is_symlink()]
    assert len(links) >= 15, links  # the planner, cpulist, the roles' host tools, the driver
    for link in links:
        target = link.resolve()
        assert target.is_file(), f"{link}: dangling or not a file"
        assert target.is_relative_to(paths.REPO), f"{link} -> {target}: outside the repository"


def test_the_tarball_holds_files_not_links(installed):
    tarball, _ = installed
    with tarfile.open(tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert not [n for n, m in members.items() if m.issym() or m.islnk()]
    for name in (
        "plugins/module_utils/cpulist.py",
        "plugins/plugin_utils/planner/plan/isolation.py",
        "roles/isolation_plan/files/host_facts.py",
        "roles/sram_driver/files/pl_abi.h",
        "playbooks/isolate.yml",
        "meta/runtime.yml",
    ):
        assert members[name].isfile(), name
    # the version is the project's one version
    assert tarball.name == f"socketlab-lab-{paths.version()}.tar.gz"


def test_no_plugin_imports_the_socketlab_package(installed):
    _, collections = installed
    tree = collections / "ansible_collections" / "socketlab" / "lab"
    found = []
    for path in tree.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found += [
                f"{path.relative_to(tree)}: {n}"
                for n in names
                if n == "socketlab" or n.startswith("socketlab.")
            ]
    assert not found, found


def test_ansible_test_sanity_offline(installed):
    _, collections = installed
    tree = collections / "ansible_collections" / "socketlab" / "lab"
    skip = [a for name in OFFLINE_SKIPPED for a in ("--skip-test", name)]
    proc = subprocess.run(
        [
            str(BIN / "ansible-test"),
            "sanity",
            "--python",
            f"{sys.version_info.major}.{sys.version_info.minor}",
            "--color",
            "no",
            *skip,
        ],
        cwd=tree,
        env=clean_env(collections),
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [line for line in proc.stdout.splitlines() if line.startswith("Running sanity test")]
    assert len(ran) >= 15, proc.stdout


def test_ansible_doc_reads_every_plugin(installed):
    """What the ansible-doc and validate-modules sanity tests check first: each module, filter
    and role documents itself (a filter without docs would be listed UNDOCUMENTED)."""
    _, collections = installed
    env = clean_env(collections)
    tree = collections / "ansible_collections" / "socketlab" / "lab"
    kinds = {
        "module": sorted(p.stem for p in (tree / "plugins/modules").glob("*.py")),
        "filter": sorted(p.stem for p in (tree / "plugins/filter").glob("*.yml")),
        "role": sorted(p.name for p in (tree / "roles").iterdir()),
    }
    assert len(kinds["module"]) == 9 and len(kinds["filter"]) == 7, kinds
    for kind, names in kinds.items():
        proc = subprocess.run(
            [
                str(BIN / "ansible-doc"),
                "--json",
                "-t",
                kind,
                *(f"socketlab.lab.{n}" for n in names),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0 and "[ERROR]" not in proc.stderr, proc.stderr
        docs = yaml.safe_load(proc.stdout)
        assert sorted(docs) == [f"socketlab.lab.{n}" for n in names], (kind, sorted(docs))


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="isolation changes kernel knobs: needs root")
def test_three_line_playbook_from_an_empty_folder(installed, ssh_pool, tmp_path, flipped_vm_knobs):  # noqa: F811
    _, collections = installed
    host = ssh_pool.hosts[0]
    work = Path(tempfile.mkdtemp(prefix="slab-user-"))  # outside the checkout, empty
    assert not work.is_relative_to(paths.REPO) and not any(work.iterdir())
    (work / "lab.yml").write_text(THREE_LINES)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {host.name: host.inventory_vars()}}}))
    # a `socketlab` ahead of the installed package: any import of it by a plugin fails the run
    poison = tmp_path / "poison" / "socketlab"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text(
        "raise ImportError('socketlab.lab must not import the socketlab package')\n"
    )
    control = Path(tempfile.mkdtemp(prefix="slcp-"))  # short: socket paths are limited
    env = clean_env(
        collections, PYTHONPATH=str(poison.parent), ANSIBLE_SSH_CONTROL_PATH_DIR=str(control)
    )
    state = tmp_path / "state"
    before = knob_snapshot()
    try:
        proc = subprocess.run(
            [
                str(BIN / "ansible-playbook"),
                "-i",
                str(inventory),
                "lab.yml",
                "-e",
                f"socketlab_state_dir={state}",
                "-e",
                "socketlab_housekeeping_per_node=1",
                "-e",
                "socketlab_noise_seconds=1",
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for master in control.iterdir():  # no ControlPersist master left behind
            subprocess.run(
                ["ssh", "-O", "exit", "-o", f"ControlPath={master}", host.address],
                capture_output=True,
                timeout=30,
            )
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # three plays per playbook (the host check, the work): isolate changed knobs, verify passed
    assert "TASK [socketlab.lab.isolation_workqueue_mask : " in output
    assert "noise over 1 s, mean per CPU" in output
    assert recap(output)[host.name]["changed"] > 0
    assert not list(state.glob("isolation-*.json")), "restore leaves no state file"
    compared = assert_same_knobs(before, knob_snapshot())
    print(f"all {len(compared)} knobs restored")
