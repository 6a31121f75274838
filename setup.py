"""Builds the wheel with the repository's data folders inside the package (socketlab/_share).

`orchestrate` needs, at run time, the host tools (collectors/), the native sources (native/),
the shipped specs and published values (experiments/), the default inventory, ansible.cfg, the
playbooks and the socketlab.lab collection. A wheel built from this tree carries them in
socketlab/_share/ (socketlab.paths finds them there), with links resolved to files; an
editable install (`make setup`) uses the checkout itself, so nothing is copied for it.
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))
from socketlab import paths  # noqa: E402 - stdlib only: which folders, one list
from socketlab.build import _source_files  # noqa: E402 - what counts as native source

#: never shipped: caches and what a checkout generates
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "generated", ".*")


class build_py_with_share(build_py):  # noqa: N801 - setuptools' command naming
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout is the share
        share = Path(self.build_lib) / "socketlab" / "_share"
        shutil.rmtree(share, ignore_errors=True)
        for name in paths.SHARED:
            src, dest = ROOT / name, share / name
            if name == "native":  # the sources socketlab.build hashes and sends, nothing built
                for rel, path in _source_files(src).items():
                    (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, dest / rel)
            elif src.is_dir():  # links (the collection's) are copied as the files they name
                shutil.copytree(src, dest, ignore=_IGNORE, symlinks=False)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)


setup(cmdclass={"build_py": build_py_with_share})
