"""Ship a layer dump to a host: generated once on the controller, copied once per host,
checksum verified, resumable.

A fresh host has no numpy and no socketlab, so a dump is never generated there
(docs/architecture.md "Where the work happens"). The controller's cache
(socketlab.layer.cache.controller_cache) holds each dump once; on the host it lands in
``<workdir>/layer-dumps/<key>`` (the path the spec's ``{{ dump.dir }}`` renders). Files go to
``<key>.part`` first and only the ones whose sha256 the host doesn't already have are sent, so
a copy cut short (lost connection, Ctrl-C) resumes where it stopped; once every file checks out
the folder is renamed into place with the manifest in it, which is what a later campaign looks
for. Only the host's coreutils are used (find, sha256sum, mkdir, mv, rm, cat).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from socketlab.errors import HostError, SocketlabError
from socketlab.execute import Executor
from socketlab.layer.cache import MANIFEST, controller_cache, ensure_dump, manifest


def host_sums(ex: Executor, folder: str) -> dict[str, str]:
    """name (relative to ``folder``) -> sha256 of the files the host has there, the manifest
    left out (as socketlab.layer.cache.file_sums does)."""
    code, out = ex.call(
        ["find", folder, "-type", "f", "-exec", "sha256sum", "{}", "+"], timeout=1800
    )
    if code != 0:
        return {}
    sums = {}
    prefix = folder.rstrip("/") + "/"
    for line in out.splitlines():
        digest, _, path = line.partition("  ")
        name = path[len(prefix) :]
        if path.startswith(prefix) and len(digest) == 64 and name != MANIFEST:
            sums[name] = digest
    return sums


def host_links(ex: Executor, folder: str) -> dict[str, str]:
    """name -> target of the symlinks the host has under ``folder`` (GNU find)."""
    code, out = ex.call(["find", folder, "-type", "l", "-printf", "%P\\t%l\\n"], timeout=600)
    if code != 0:
        return {}
    return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same filesystem: no second copy of a 220 MB dump
    except OSError:
        shutil.copy2(src, dst)


def ship_dump(
    ex: Executor,
    ref: dict,
    host_dir: str,
    *,
    cache: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> str:
    """Make sure the host has the dump ``ref`` (a DumpRef.as_dict()) at ``host_dir``; return how
    it got there ("present", "copied N files, X MiB", "linked")."""
    try:
        local = ensure_dump(
            ref["shape"],
            ref["context"],
            ref["batch"],
            ref["seed"],
            cache or controller_cache(),
            ref.get("variant", "default"),
            ref.get("tp", 1),
            ref.get("rank", 0),
            ref.get("checkpoint"),
            ref.get("layer"),
        )
        sums = manifest(local)
    except SocketlabError as exc:
        raise HostError(f"layer dump {ref['key']}: {exc}") from None
    want = json.dumps(sums, sort_keys=True)
    if ex.controller:  # the host is this machine: hard links into its work folder
        final = Path(host_dir)
        try:
            if json.dumps(json.loads((final / MANIFEST).read_text()), sort_keys=True) == want:
                return "present"
        except (OSError, ValueError):
            pass
        part = final.with_name(final.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(local, part, symlinks=True, copy_function=_link_or_copy)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(part, final)
        return "linked"
    code, out = ex.call(["cat", f"{host_dir}/{MANIFEST}"])
    if code == 0:
        try:
            if json.dumps(json.loads(out), sort_keys=True) == want:
                return "present"
        except ValueError:
            pass
    part = f"{host_dir}.part"
    t0 = time.monotonic()
    files, links = sums["files"], sums["links"]
    have = host_sums(ex, part)
    todo = [name for name, digest in files.items() if have.get(name) != digest]
    folders = sorted({os.path.dirname(f"{part}/{name}") for name in [*todo, *links]} | {part})
    ex.check(["mkdir", "-p", *folders], what="mkdir for the layer dump")
    size = 0
    for i, name in enumerate(todo, 1):
        path = local / name
        ex.put(path, f"{part}/{name}")
        size += path.stat().st_size
        if i % 50 == 0:
            log(f"layer dump {ref['key']}: sent {i}/{len(todo)} files")
    if links:  # one tar of the symlinks (the rows' shared weights), extracted as links
        with tempfile.TemporaryDirectory(prefix="dump-links-") as scratch:
            ex.send_tree({name: local / name for name in links}, part, Path(scratch))
    got = host_sums(ex, part)
    bad = sorted(name for name, digest in files.items() if got.get(name) != digest)
    got_links = host_links(ex, part)
    bad += sorted(name for name, target in links.items() if got_links.get(name) != target)
    if bad:
        raise HostError(
            f"layer dump {ref['key']}: {len(bad)} file(s) differ after the copy "
            f"(first: {bad[0]}); a rerun sends them again"
        )
    ex.put(local / MANIFEST, f"{part}/{MANIFEST}")
    ex.check(["rm", "-rf", host_dir], what="removing an incomplete layer dump")
    ex.check(["mv", "-T", part, host_dir], what="moving the layer dump into place")
    resumed = f", {len(files) - len(todo)} already there" if len(todo) < len(files) else ""
    return (
        f"copied {len(todo)} files and {len(links)} links, {size / 1048576:.1f} MiB in "
        f"{time.monotonic() - t0:.1f} s{resumed}"
    )
