"""Pristine test hosts: each with its own root filesystem, sharing nothing with the controller.

tests/support/netns.py's hosts share this machine's filesystem, so a step that only works
because the controller's .venv, /tmp or checkout is visible can't fail there. These can:

- **The image**: Debian 11 "bullseye" minbase (python3 3.9.2, as Amazon Linux 2023's python3;
  no numpy, no gcc, make or rsync), openssh-server, sudo, and a login user ec2-user with
  passwordless sudo, as a cloud image has. Built once by scripts/pristine-rootfs.sh
  (mmdebstrap, ~30 s on 2 cores) into .cache/pristine/<digest>/, the digest over that script,
  so editing it rebuilds; a second `make test` reuses it (a lock makes one builder).
- **A host**: its own mount namespace whose / is an overlay (lower: the image, read-only; upper:
  a folder of the pool's, so hosts never see each other's writes and each starts clean), its
  own PID namespace (it sees none of the controller's processes), UTS namespace (hostname =
  inventory name) and network namespace, joined to this machine by a veth pair with /32
  routes, so a test can give a host the exact address a cloud API handed out (moto gives
  subnet addresses from .4 on). /proc is its own, /tmp and /run are tmpfs, /dev and /sys are
  the machine's (isolation writes kernel knobs and cgroups: the kernel is shared anyway). Its
  sshd is the image's, its login ec2-user with the pool's key (put into the upper layer at
  boot, as cloud-init would).
- **Packages**: apt inside a host reaches Debian's archive through a small HTTP proxy on the
  controller side of the veths (`Acquire::http::Proxy`), which forwards only to the mirror this
  machine's apt uses; no other address is reachable from a host.
- **Cleanup**: close() stops each host's namespace by the PID of its `unshare` (the host's
  PID 1 and everything in it die with it, and its mounts with its mount namespace), deletes
  the veths and network namespaces (named with our PID), stops the proxy, removes the folders.

`snapshot(host)` lists the upper layer (path -> kind, size, sha256), so a test can compare the
host's filesystem after a campaign with the one right after boot.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import http.server
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.netns import SshHost

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "pristine-rootfs.sh"
CACHE = REPO / ".cache" / "pristine"
USER = "ec2-user"


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def pristine_available() -> str | None:
    """None when pristine hosts can be made here, else the one-line reason."""
    if os.geteuid() != 0:
        return "needs root (namespaces, overlay mounts)"
    for tool in ("mmdebstrap", "unshare", "ip", "ssh-keygen"):
        if not shutil.which(tool):
            return f"{tool} not installed (scripts/system-deps.sh)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlayfs"
    return None


def image() -> Path:
    """The cached image folder, built first when missing (one builder across processes)."""
    digest = hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:12]
    final = CACHE / f"bullseye-{digest}"
    if (final / "usr" / "bin" / "python3").exists():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / "usr" / "bin" / "python3").exists():
            t0 = time.monotonic()
            proc = subprocess.run(
                ["bash", str(SCRIPT), str(final)], capture_output=True, text=True, timeout=1200
            )
            if proc.returncode != 0:
                raise RuntimeError(f"pristine image build failed: {proc.stderr.strip()[-500:]}")
            print(f"pristine image built in {time.monotonic() - t0:.0f} s: {final}")
    return final


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (scheme://host/path), from its sources."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1].rstrip("/").endswith("debian"):
                return line.split()[1].rstrip("/")
    sources = Path("/etc/apt/sources.list")
    if sources.exists():
        for line in sources.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["deb"] and parts[1].rstrip("/").endswith("debian"):
                return parts[1].rstrip("/")
    raise RuntimeError("no Debian mirror in this machine's apt sources")


class _ArchiveProxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _proxy_handler(mirror_host: str):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlsplit(self.path)
            if url.scheme != "http" or url.hostname != mirror_host:
                self.send_error(403, "only the Debian archive")
                return
            conn = http.client.HTTPConnection(mirror_host, url.port or 80, timeout=60)
            try:
                conn.request(
                    "GET",
                    url.path + (f"?{url.query}" if url.query else ""),
                    headers={"User-Agent": "socketlab-pristine-proxy"},
                )
                resp = conn.getresponse()
                self.send_response(resp.status)
                for name in ("Content-Type", "Content-Length", "Last-Modified", "ETag"):
                    if resp.getheader(name):
                        self.send_header(name, resp.getheader(name))
                self.end_headers()
                shutil.copyfileobj(resp, self.wfile, 1 << 16)
            except OSError:
                with contextlib.suppress(OSError):
                    self.send_error(502)
            finally:
                conn.close()

        do_HEAD = do_GET

    return Handler


@dataclass(frozen=True)
class PristineHost(SshHost):
    """A netns sshd host (tests/support/netns.py's fields: name, netns, address, ...) with a
    root filesystem of its own; ``sshd_pid`` is its `unshare` (its namespace's PID 1 dies with
    it)."""

    upper: Path = field(default=Path())  #: the overlay's upper layer: everything the host wrote
    veth: str = field(default="", repr=False)

    def ssh_argv(self, *command: str) -> list[str]:
        argv = super().ssh_argv(*command)
        at = argv.index(f"{self.user}@{self.address}")
        return [*argv[:at], "-o", "ControlMaster=no", *argv[at:]]

    def inventory_vars(self) -> dict[str, object]:
        return {**super().inventory_vars(), "socketlab_become": True}


_POOLS = 0

# Runs as the host's PID 1 before sshd, with this machine's /bin/sh, in the host's own mount,
# PID and UTS namespaces: the overlay, its own /proc, tmpfs /tmp and /run, then pivot_root into
# it ("pivot_root . ." then unmounting the old root: nothing of this machine stays reachable).
_BOOT = r"""
set -e
lower=$1 upper=$2 work=$3 root=$4 name=$5 addr=$6
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/run/sshd"
hostname "$name"
cd "$root"
pivot_root . .
umount -l .
cd /
exec /usr/sbin/sshd -D -e -o "ListenAddress=$addr" -o PasswordAuthentication=no \
  -o KbdInteractiveAuthentication=no -o UseDNS=no -o MaxStartups=100:30:200 -o MaxSessions=50
"""


class PristineHostPool:
    """Makes pristine hosts; ``close()`` removes every one it made."""

    def __init__(self, workdir: Path | None = None) -> None:
        global _POOLS
        reason = pristine_available()
        if reason:
            raise RuntimeError(f"pristine hosts: not available: {reason}")
        self.image = image()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="slab-pristine-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        k, _POOLS = _POOLS, _POOLS + 1
        pid = os.getpid()
        self.tag = f"{pid % 100000}{chr(ord('a') + k % 26)}"
        # 10.192-255.x.0/24, away from netns.py's 10.64-191 pools
        self.net = (10, 192 + (pid >> 8) % 64, (pid + 37 * k) % 256)
        self.gateway = f"{self.net[0]}.{self.net[1]}.{self.net[2]}.1"
        self.key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.hosts: list[PristineHost] = []
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key), "-C", "slab")
        self._proxy: _ArchiveProxy | None = None
        self._proxy_port = 0
        self._uid, self._gid = self._image_ids(USER)

    def _image_ids(self, user: str) -> tuple[int, int]:
        for line in (self.image / "etc" / "passwd").read_text().splitlines():
            parts = line.split(":")
            if parts[0] == user:
                return int(parts[2]), int(parts[3])
        raise RuntimeError(f"pristine image has no user {user}")

    def subnet_address(self, index: int) -> str:
        """The pool's address number ``index`` (e.g. 4: what moto hands out first)."""
        return f"{self.net[0]}.{self.net[1]}.{self.net[2]}.{index}"

    @property
    def subnet(self) -> str:
        return f"{self.net[0]}.{self.net[1]}.{self.net[2]}.0/24"

    def _start_proxy(self) -> int:
        if self._proxy is None:
            mirror = urlsplit(apt_mirror())
            self._mirror = mirror
            server = _ArchiveProxy((self.gateway, 0), _proxy_handler(mirror.hostname))
            self._proxy = server
            self._proxy_port = server.server_address[1]
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self._proxy_port

    def _seed_upper(self, upper: Path, name: str) -> None:
        """What cloud-init would write: hostname, host key, the login key, apt's way out."""
        etc = upper / "etc"
        (etc / "ssh").mkdir(parents=True)
        (etc / "hostname").write_text(f"{name}\n")
        # as cloud-init writes it (minbase has none): sudo resolves its own host name
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n")
        _run(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-f",
            str(etc / "ssh" / "ssh_host_ed25519_key"),
        )
        ssh = upper / "home" / USER / ".ssh"
        ssh.mkdir(parents=True)
        (ssh / "authorized_keys").write_text(self.key.with_suffix(".pub").read_text())
        os.chmod(ssh, 0o700)
        os.chmod(ssh / "authorized_keys", 0o600)
        for path in (upper / "home" / USER, ssh, ssh / "authorized_keys"):
            os.chown(path, self._uid, self._gid)
        os.chmod(upper / "home" / USER, 0o755)
        apt = etc / "apt" / "apt.conf.d"
        apt.mkdir(parents=True)
        (apt / "90pristine-proxy").write_text(
            f'Acquire::http::Proxy "http://{self.gateway}:{self._start_proxy()}";\n'
        )
        sources = etc / "apt"
        mirror = f"{self._mirror.scheme}://{self._mirror.netloc}{self._mirror.path}"
        (sources / "sources.list").write_text(f"deb {mirror} bullseye main\n")

    def add(self, name: str | None = None, address: str | None = None) -> PristineHost:
        index = len(self.hosts)
        name = name or f"slab{self.tag}p{index}"
        address = address or self.subnet_address(10 + index)
        netns = f"slab{self.tag}q{index}"
        veth_out, veth_in = f"sp{self.tag}o{index}", f"sp{self.tag}i{index}"
        root = self.workdir / name
        upper, work, merged = root / "upper", root / "work", root / "merged"
        for d in (upper, work, merged):
            d.mkdir(parents=True)
        _run("ip", "netns", "add", netns)
        try:
            _run("ip", "link", "add", veth_out, "type", "veth", "peer", "name", veth_in)
            _run("ip", "link", "set", veth_in, "netns", netns)
            _run("ip", "-n", netns, "link", "set", "lo", "up")
            _run("ip", "addr", "add", f"{self.gateway}/32", "dev", veth_out)
            _run("ip", "link", "set", veth_out, "up")
            _run("ip", "route", "replace", f"{address}/32", "dev", veth_out, "src", self.gateway)
            _run("ip", "-n", netns, "addr", "add", f"{address}/32", "dev", veth_in)
            _run("ip", "-n", netns, "link", "set", veth_in, "up")
            _run("ip", "-n", netns, "route", "add", f"{self.gateway}/32", "dev", veth_in)
            _run("ip", "-n", netns, "route", "add", "default", "via", self.gateway, "dev", veth_in)
            self._seed_upper(upper, name)
            log = open(root / "boot.log", "wb")  # noqa: SIM115 - kept for the process
            proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    netns,
                    "unshare",
                    "--mount",
                    "--uts",
                    "--pid",
                    "--fork",
                    "--kill-child",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    _BOOT,
                    "sh",
                    str(self.image),
                    str(upper),
                    str(work),
                    str(merged),
                    name,
                    address,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            host = PristineHost(
                name,
                netns,
                address,
                22,
                USER,
                self.key,
                self.known_hosts,
                proc.pid,
                upper,
                veth_out,
            )
            self.hosts.append(host)
            _wait_port(address, 22, root / "boot.log", proc)
        except BaseException:
            if not self.hosts or self.hosts[-1].name != name:
                subprocess.run(["ip", "link", "del", veth_out], capture_output=True)
                subprocess.run(["ip", "netns", "del", netns], capture_output=True)
            raise
        return host

    def inventory(self, path: Path, group: str = "testhosts", extra: dict | None = None) -> Path:
        import yaml

        hosts = {
            h.name: {**h.inventory_vars(), **(extra or {}).get(h.name, {})} for h in self.hosts
        }
        path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": hosts}}}}))
        return path

    def stop(self, host: PristineHost) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(host.sshd_pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(host.sshd_pid, 0)

    def close(self) -> None:
        for host in self.hosts:
            self.stop(host)
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        self.hosts.clear()
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_port(
    address: str, port: int, log: Path, proc: subprocess.Popen, timeout: float = 20.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pristine host did not boot: {log.read_text()[-500:]}")
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"pristine host's sshd did not listen on {address}:{port}")


#: Written by logins themselves, not by what a test does on the host
LOGIN_NOISE = ("var/log/lastlog", "var/log/wtmp", "var/log/btmp")


def snapshot(host: PristineHost) -> dict[str, tuple]:
    """The upper layer: path -> (kind, size, sha256 or link target); overlay whiteouts (char
    devices 0/0: a file the host deleted) as ("deleted",)."""
    out: dict[str, tuple] = {}
    for path in sorted(host.upper.rglob("*")):
        rel = path.relative_to(host.upper).as_posix()
        st = path.lstat()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        elif os.path.stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            out[rel] = ("deleted",)
        elif path.is_file():
            out[rel] = ("file", st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> dict[str, str]:
    """path -> added / removed / changed / deleted (a file of the image removed) between two
    snapshots of the upper layer, login noise left out."""
    diff = {}
    for rel in sorted(set(before) | set(after)):
        # folders are copied up whenever something under them changes: the files say what
        if rel in LOGIN_NOISE or ("dir",) in (before.get(rel), after.get(rel)):
            continue
        if after.get(rel) == ("deleted",) and before.get(rel) != ("deleted",):
            diff[rel] = "deleted"  # a file of the image the host removed
        elif rel not in before:
            diff[rel] = "added"
        elif rel not in after:
            diff[rel] = "removed"
        elif before[rel] != after[rel]:
            diff[rel] = "changed"
    return diff


@contextlib.contextmanager
def pristine_hosts(count: int, workdir: Path | None = None) -> Iterator[PristineHostPool]:
    pool = PristineHostPool(workdir)
    try:
        for _ in range(count):
            pool.add()
        yield pool
    finally:
        pool.close()
