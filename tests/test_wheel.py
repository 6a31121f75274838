"""The wheel as a user installs it: built from this tree, installed with its dependencies into a
fresh virtual environment (the base install: no [serve], [ref] or [aws]), then used from an
empty folder outside the checkout. `orchestrate` must find the shipped spec, the host tools,
the native sources, the published values and the collection through the package.

The build runs on a copy of the tree (setuptools writes build/ beside the sources) without
build isolation (setuptools is in our venv); the install takes its dependencies from pip's
usual places (its cache makes a second run quick). The install's size and time are printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from socketlab import paths

#: what the wheel is built from (pyproject's build needs; setup.py copies paths.SHARED in)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in", "src", *paths.SHARED)
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "generated", "*.o")


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with the wheel installed: (its bin folder, the wheel)."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    for name in SOURCES:
        src, dest = paths.REPO / name, tree / name
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True, ignore=IGNORE)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest, follow_symlinks=False)
    started = time.monotonic()
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(root / "dist"),
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (root / "dist").glob("socketlab-*.whl")
    build_s = time.monotonic() - started
    env_dir = root / "venv"
    started = time.monotonic()
    subprocess.run([sys._base_executable, "-m", "venv", str(env_dir)], check=True, timeout=120)
    installed = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    print(
        f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB, built in {build_s:.1f} s; "
        f"fresh venv with its dependencies in {time.monotonic() - started:.1f} s, "
        f"{du(env_dir) / 1e6:.0f} MB"
    )
    return env_dir / "bin", wheel


def test_the_base_install_is_light(venv):
    bindir, _ = venv
    listed = subprocess.run(
        [str(bindir / "python"), "-m", "pip", "list", "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    names = {line.split("==")[0] for line in listed.splitlines()}
    assert "socketlab" in names and "ansible-core" in names and "fabric" in names
    heavy = names & {"llama-cpp-python", "torch", "transformers", "boto3", "pyarrow", "moto"}
    assert not heavy, f"the base install pulled extras' packages: {sorted(heavy)}"
    # what needs an extra says which, in one line
    cloud = subprocess.run(
        [str(bindir / "orchestrate"), "cloud", "list", "--region", "eu-west-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cloud.returncode == 2, cloud.stdout + cloud.stderr
    assert re.fullmatch(
        r"orchestrate: error: cloud needs (boto3|botocore), which is not "
        r"installed; expected pip install 'socketlab\[aws\]'",
        cloud.stderr.strip(),
    ), cloud.stderr


def test_quickstart_runs_and_reports_from_an_empty_folder(venv, tmp_path):
    bindir, _ = venv
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert not work.is_relative_to(paths.REPO)
    # PATH: the venv's own ansible-inventory; nothing of the checkout's environment
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SOCKETLAB_"))}
    env["PATH"] = f"{bindir}:{env.get('PATH', '')}"
    version = subprocess.run(
        [str(bindir / "orchestrate"), "--version"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == f"socketlab {paths.version()}"
    # localhost with a work folder of its own (its host lock: a `make run` may hold the default)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": str(bindir / "python"),
                            "socketlab_workroot": str(tmp_path / "work"),
                        }
                    }
                }
            }
        )
    )
    started = time.monotonic()
    # one repetition of each point (8 runs, not 24): the path is the same, CI's time is not
    run = subprocess.run(
        [
            str(bindir / "orchestrate"),
            "run",
            "quickstart",
            "-i",
            str(inventory),
            "--repetitions",
            "1",
            "--plain",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    run_s = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    used = [line for line in run.stderr.splitlines() if "using the shipped" in line]
    assert used and "/site-packages/socketlab/_share/experiments/quickstart.yaml" in used[0], used
    assert "statuses={'ok': 8}" in run.stderr, run.stderr[-2000:]  # plain progress: stderr
    report = subprocess.run(
        [str(bindir / "orchestrate"), "report", "quickstart"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    assert (work / "results" / "quickstart" / "report.md").is_file()
    print(f"orchestrate run quickstart from {work}: 8 runs ok in {run_s:.1f} s; {used[0]}")


def test_the_playbooks_and_collection_ship(venv, tmp_path):
    """ansible-playbook finds the collection through the package's ansible.cfg."""
    bindir, _ = venv
    share = next(Path(bindir).parent.glob("lib/python*/site-packages/socketlab/_share"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_CONFIG"] = str(share / "ansible.cfg")
    proc = subprocess.run(
        [
            str(bindir / "ansible-playbook"),
            "--syntax-check",
            str(share / "playbooks/isolate.yml"),
            str(share / "playbooks/restore.yml"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in (
        "collectors/host_facts.py",
        "native/Makefile",
        "experiments/published",
        "ansible_collections/socketlab/lab/plugins/module_utils/cpulist.py",
    ):
        path = share / name
        assert path.exists() and not path.is_symlink(), name
