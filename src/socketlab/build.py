"""Builds: native/ compiled on the target host with its own compiler, cached by source hash.

The source tree (native/ without build outputs) is hashed here; the build hash adds the make
target, flags and compiler. On the host the tree is unpacked into ``<workdir>/builds/<build
hash>/`` and ``make`` runs there with ``BUILD=<folder>``: the toolkit decides the folder
(Build.dir, ``build/<compiler name>``), so CC in a host's environment can't move the binaries
away from the path the spec's ``{{ build.dir }}`` renders. A finished build leaves
``.manifest.json`` (source hash, compiler and version, flags, sha256 of every executable it
produced); a later campaign that finds it skips the compile. The manifest is stamped on
every run that uses the build.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from socketlab import paths
from socketlab.errors import HostError
from socketlab.safepath import inside

#: Never part of the source: build outputs and editor/VCS litter.
_SKIP_DIRS = {"build", "__pycache__"}
_SKIP_SUFFIXES = (".o", ".a", ".so", ".d", ".pyc")
MANIFEST = ".manifest.json"


def _source_files(root: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part in _SKIP_DIRS for part in rel.parts):
            continue
        if not path.is_file() or path.name.endswith(_SKIP_SUFFIXES):
            continue
        with open(path, "rb") as fh:
            if fh.read(4) == b"\x7fELF":  # a binary someone built in place
                continue
        files[rel.as_posix()] = path
    return files


def source_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for name, path in _source_files(root).items():
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


#: a relative path into a build folder as a spec writes one: build/<folder>/<file>
_BUILD_PATH = re.compile(r"(?<![\w./+-])(?:\./)?build/([A-Za-z0-9_.+-]+)/([^\s=,:]*)")


def misplaced(build, text: str) -> tuple[str, str] | None:
    """(path, file) of the first path in ``text`` into another folder than ``build.dir``.

    Only a build that sets `cc` is checked: without one its folder is build/cc, as it always
    was, so a literal ``build/cc/ladder`` stays right (and a Makefile with its own layout is
    left alone). With one, ``build/cc/...`` is the stale default: it would fail at run time
    with "No such file", so planning says so instead.
    """
    if not build.cc:
        return None
    for match in _BUILD_PATH.finditer(text):
        if f"build/{match.group(1)}" != build.dir:
            return match.group(0), match.group(2)
    return None


@dataclass(frozen=True)
class BuildJob:
    """One build as the runner needs it: what to compile, and its identity."""

    name: str
    root: Path  #: local source tree sent to the host (native/)
    source: str  #: directory inside root where make runs
    target: str
    flags: str
    source_hash: str
    build_hash: str
    cc: str = ""  #: make's CC; "" = the Makefile's (the host's `cc`)
    dir: str = "build/cc"  #: BUILD=, relative to remote_dir: where the binaries go

    @classmethod
    def from_spec(cls, build, root: Path | None = None) -> BuildJob:
        """From a socketlab.spec.model.Build (name, source, target, flags, cc)."""
        root = Path(root or paths.NATIVE)
        src_hash = source_hash(root)
        fields = {
            "source_hash": src_hash,
            "source": build.source,
            "target": build.target,
            "flags": build.flags,
        }
        if build.cc:  # only when set: builds without one keep their hash, so their runs resume
            fields["cc"] = build.cc
        build_hash = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
        return cls(
            build.name,
            root,
            build.source,
            build.target,
            build.flags,
            src_hash,
            build_hash,
            build.cc,
            build.dir,
        )

    def remote_root(self, executor) -> str:
        return f"{executor.workdir}/builds/{self.build_hash}"

    def pidfile(self, executor) -> str:
        """make's pidfile: a run's kind of start, so a stop (``Executor.interrupt``) kills the
        compile's group by its PID. Beside the tree, which is removed before each build."""
        return f"{self.remote_root(executor)}.make/make.pid"

    def remote_dir(self, executor) -> str:
        """Where make runs, and the working directory of every run using this build."""
        source = self.source.strip("/")
        root = self.remote_root(executor)
        return root if source in ("", ".") else f"{root}/{source}"


def ensure_built(job: BuildJob, executor, scratch: Path, log=None) -> dict:
    """Build ``job`` on the executor's host unless a manifest for it is there; return it."""
    root = job.remote_root(executor)
    code, text = executor.call(["cat", f"{root}/{MANIFEST}"])
    if code == 0:
        try:
            manifest = json.loads(text)
            return {**manifest, "cached": True}
        except ValueError:
            pass  # a torn manifest: build again
    if log:
        log(f"{executor.name}: building {job.name} ({job.build_hash}) on the host")
    executor.call(["rm", "-rf", root, f"{root}.make"])
    executor.send_tree(_source_files(job.root), root, scratch)
    code, ncpu = executor.call(["nproc"])
    jobs = ncpu.strip() if code == 0 and ncpu.strip().isdigit() else "1"
    # BUILD always, CC when the spec names one: variables on make's command line beat both
    # the Makefile's defaults and the host's environment
    variables = [
        f"BUILD={job.dir}",
        *([f"CC={job.cc}"] if job.cc else []),
        *([f"CFLAGS={job.flags}"] if job.flags else []),
    ]
    # `--` ends make's options: a goal can't be read as one (the spec's target is checked to
    # be a goal name at load time, socketlab.spec.buildargs; words with '=' after it are still
    # assignments, so ours stay so)
    make = ["make", "-j", jobs, "-C", job.remote_dir(executor), "--", job.target, *variables]
    started = time.time()
    # run, not call: started with a pidfile, it is stopped by PID like a run (SIGTERM mid-make);
    # the manifest below is written only after make succeeded, so a killed build is never
    # taken as built (the next campaign finds no manifest and builds again)
    result = executor.run(make, timeout=1800, out_dir=f"{root}.make", pidfile=job.pidfile(executor))
    code = 124 if result.timed_out else result.exit_code
    if code != 0:
        tail = " | ".join((result.stderr.strip() or result.stdout.strip()).splitlines()[-3:])
        raise HostError(f"{executor.name}: build '{job.name}' failed (make exit {code}): {tail}")
    # The compiler and flags the compile really used (the Makefile's or the environment's
    # unless the spec set them): make prints its own variables. No shell: the argv reaches
    # the host as is.
    probe = [
        "make",
        "-s",
        "--no-print-directory",
        "-C",
        job.remote_dir(executor),
        "--eval",
        "_socketlab_probe:\n\t@echo 'cc=$(CC)'\n\t@echo 'cflags=$(CFLAGS)'",
        "--",
        "_socketlab_probe",
        *variables,
    ]
    code, printed = executor.call(probe, timeout=60)
    said = dict(line.partition("=")[::2] for line in printed.splitlines() if code == 0)
    cflags = said["cflags"].strip() if "cflags" in said else None
    cc = said.get("cc", "").split() or [job.cc or "cc"]
    compiler = executor.call([*cc, "--version"])[1].strip().splitlines()
    code, listing = executor.call(
        [
            "find",
            root,
            "-type",
            "f",
            "-perm",
            "-u+x",
            "-newermt",
            f"@{int(started) - 1}",
            "-exec",
            "sha256sum",
            "{}",
            "+",
        ]
    )
    binaries = {}
    for line in listing.splitlines():
        digest, _, path = line.partition("  ")
        if path:
            binaries[path.removeprefix(root + "/")] = digest
    manifest = {
        "name": job.name,
        "source": job.source,
        "target": job.target,
        "flags": job.flags,  #: as the spec gave them ("" = the Makefile's)
        "cc": job.cc,  #: as the spec gave it ("" = the Makefile's)
        "dir": job.dir,  #: the binaries' folder under the source directory
        "cflags": cflags,  #: as make used them; None when make could not say
        "source_hash": job.source_hash,
        "build_hash": job.build_hash,
        "compiler": compiler[0] if compiler else "unknown",
        "make": " ".join(make[6:]),  #: the goal and variables
        "binaries": binaries,
        "built_at": started,
        "build_s": round(time.time() - started, 3),
    }
    local = inside(scratch, f"manifest-{executor.name}.json", what="host name")
    local.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    executor.put(local, f"{root}/{MANIFEST}")
    local.unlink(missing_ok=True)
    return {**manifest, "cached": False}
