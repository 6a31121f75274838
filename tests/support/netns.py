"""sshd test hosts in network namespaces, made and removed by the tests.

Each host is a network namespace joined to this machine by a veth pair, with its own UTS
namespace (so its own hostname) and an sshd listening on its address. The filesystem and the
kernel are shared with this machine, so anything per host (state files, result folders) must be
keyed by inventory name. Names and subnets include this process's PID so that two test sessions
on one machine don't collide.

Processes started here are stopped by their PIDs; namespaces and links are deleted by name
(they are ours: the name carries our PID). `login_user` adds a non-root login (with or without
passwordless sudo) for the hosts; it too is on this machine, since /etc is shared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshHost:
    name: str  #: inventory name and hostname inside the namespace
    netns: str
    address: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    sshd_pid: int

    def ssh_argv(self, *command: str) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.key_file),
            "-p",
            str(self.port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            f"{self.user}@{self.address}",
            *command,
        ]

    def inventory_vars(self) -> dict[str, str]:
        return {
            "ansible_host": self.address,
            "ansible_port": str(self.port),
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.key_file),
            "ansible_ssh_common_args": (
                f"-o StrictHostKeyChecking=no -o UserKnownHostsFile={self.known_hosts}"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
        }


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _wait_port(address: str, port: int, netns: str, timeout: float = 10.0) -> None:
    # The veth makes the namespace's address reachable from here; poll until sshd listens.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"sshd in {netns} did not listen on {address}:{port}")


def netns_available() -> str | None:
    """None when test hosts can be made here, else the reason they can't."""
    if os.geteuid() != 0:
        return "needs root"
    if not Path(SSHD).exists():
        return "sshd not installed (openssh-server)"
    if not shutil.which("ip"):
        return "iproute2 not installed"
    return None


_POOLS_MADE = 0  # pools made by this process


class SshHostPool:
    """Makes sshd test hosts; ``close()`` removes every one it made."""

    def __init__(self, workdir: Path | None = None) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="slab-ssh-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        # names and a 10.<a>.<b>.0/24 per pool, from the PID and the pool's number in this
        # process (a test may make its own pool while the session's pool exists), away from
        # 10.200.x used in docs
        global _POOLS_MADE
        k, _POOLS_MADE = _POOLS_MADE, _POOLS_MADE + 1
        pid = os.getpid()
        self.tag = f"{pid % 100000}" + ("" if k == 0 else chr(ord("a") + k % 26))
        self.net = (10, 64 + (pid >> 8) % 128, (pid + 101 * k) % 256)
        self.key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.hosts: list[SshHost] = []
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key), "-C", "slab")
        (self.workdir / "authorized_keys").write_text((self.workdir / "id_ed25519.pub").read_text())
        os.chmod(self.workdir / "authorized_keys", 0o600)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    def add(self, name: str | None = None) -> SshHost:
        index = len(self.hosts)
        if index >= 60:
            raise RuntimeError("at most 60 test hosts per pool")
        name = name or f"slab{self.tag}h{index}"
        netns = f"slab{self.tag}n{index}"
        veth_out, veth_in = f"sl{self.tag}o{index}", f"sl{self.tag}i{index}"
        a, b, c = self.net
        base = 4 * index
        outer, inner = f"{a}.{b}.{c}.{base + 1}", f"{a}.{b}.{c}.{base + 2}"
        _run("ip", "netns", "add", netns)
        try:
            _run("ip", "link", "add", veth_out, "type", "veth", "peer", "name", veth_in)
            _run("ip", "link", "set", veth_in, "netns", netns)
            _run("ip", "-n", netns, "link", "set", "lo", "up")
            _run("ip", "addr", "add", f"{outer}/30", "dev", veth_out)
            _run("ip", "link", "set", veth_out, "up")
            _run("ip", "-n", netns, "addr", "add", f"{inner}/30", "dev", veth_in)
            _run("ip", "-n", netns, "link", "set", veth_in, "up")
            proc = self._start_sshd(name, netns, inner)
            _wait_port(inner, 22, netns)
        except BaseException:
            self._remove_netns(netns, veth_out)
            raise
        host = SshHost(name, netns, inner, 22, "root", self.key, self.known_hosts, proc.pid)
        self.hosts.append(host)
        return host

    def add_behind(self, bastion: SshHost, name: str | None = None) -> SshHost:
        """A host reachable only through ``bastion``: its namespace is linked to the bastion's
        alone (no link to this machine), so SSH to it goes through the bastion's sshd
        (ProxyJump); this machine has no route to its address."""
        index = len(self.hosts)
        name = name or f"slab{self.tag}h{index}"
        netns = f"slab{self.tag}n{index}"
        side_b, side_t = f"sl{self.tag}o{index}", f"sl{self.tag}i{index}"
        a, b, c = self.net
        near, far = f"{a}.{b}.{c}.{4 * index + 1}", f"{a}.{b}.{c}.{4 * index + 2}"
        _run("ip", "netns", "add", netns)
        try:
            _run("ip", "link", "add", side_b, "type", "veth", "peer", "name", side_t)
            _run("ip", "link", "set", side_b, "netns", bastion.netns)
            _run("ip", "link", "set", side_t, "netns", netns)
            _run("ip", "-n", netns, "link", "set", "lo", "up")
            _run("ip", "-n", bastion.netns, "addr", "add", f"{near}/30", "dev", side_b)
            _run("ip", "-n", bastion.netns, "link", "set", side_b, "up")
            _run("ip", "-n", netns, "addr", "add", f"{far}/30", "dev", side_t)
            _run("ip", "-n", netns, "link", "set", side_t, "up")
            proc = self._start_sshd(name, netns, far)
            # from the bastion's side: this machine can't reach the address
            deadline = time.monotonic() + 10
            while subprocess.run(
                ["ip", "netns", "exec", bastion.netns, "bash", "-c", f"exec 3<>/dev/tcp/{far}/22"],
                capture_output=True,
            ).returncode:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd in {netns} did not listen on {far}:22")
                time.sleep(0.05)
        except BaseException:
            self._remove_netns(netns, side_b)
            raise
        host = SshHost(name, netns, far, 22, "root", self.key, self.known_hosts, proc.pid)
        self.hosts.append(host)
        return host

    def _start_sshd(self, name: str, netns: str, address: str) -> subprocess.Popen:
        hostkey = self.workdir / f"hostkey_{name}"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
        conf = self.workdir / f"sshd_{name}.conf"
        conf.write_text(
            f"ListenAddress {address}\nPort 22\nHostKey {hostkey}\n"
            f"PidFile {self.workdir}/sshd_{name}.pid\n"
            # then the user's own file, for login_user's users (this one only root reads)
            f"AuthorizedKeysFile {self.workdir}/authorized_keys .ssh/authorized_keys\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "Subsystem sftp /usr/lib/openssh/sftp-server\n"
            "MaxStartups 100:30:200\nMaxSessions 50\nAcceptEnv LANG LC_*\n"
        )
        log = open(self.workdir / f"sshd_{name}.log", "wb")  # noqa: SIM115 - kept for the process
        # exec keeps one PID from `ip netns exec` down to sshd, so we stop it by that PID.
        return subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                netns,
                "unshare",
                "--uts",
                "sh",
                "-c",
                f'hostname "$1"; exec {SSHD} -D -e -f "$2"',
                "sh",
                name,
                str(conf),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, host: SshHost) -> None:
        """Stop a host's sshd (by PID) but keep its namespace, to simulate an outage."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(host.sshd_pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(host.sshd_pid, 0)

    def restart(self, host: SshHost) -> SshHost:
        """Start a stopped host's sshd again, same address and keys."""
        conf = self.workdir / f"sshd_{host.name}.conf"
        log = open(self.workdir / f"sshd_{host.name}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host.netns,
                "unshare",
                "--uts",
                "sh",
                "-c",
                f'hostname "$1"; exec {SSHD} -D -e -f "$2"',
                "sh",
                host.name,
                str(conf),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_port(host.address, host.port, host.netns)
        new = SshHost(**{**host.__dict__, "sshd_pid": proc.pid})
        self.hosts[self.hosts.index(host)] = new
        return new

    def inventory(self, path: Path, group: str = "testhosts", extra: dict | None = None) -> Path:
        """Write an Ansible YAML inventory of every host into ``path``."""
        import yaml

        hosts = {
            h.name: {**h.inventory_vars(), **(extra or {}).get(h.name, {})} for h in self.hosts
        }
        path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": hosts}}}}))
        return path

    @staticmethod
    def _remove_netns(netns: str, veth_out: str) -> None:
        subprocess.run(["ip", "link", "del", veth_out], capture_output=True)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)

    def close(self) -> None:
        for index, host in enumerate(self.hosts):
            self.stop(host)
            self._remove_netns(host.netns, f"sl{self.tag}o{index}")
        self.hosts.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)


_USERS_MADE = 0  # login users made by this process


@contextlib.contextmanager
def login_user(host: SshHost, sudo: str | None = "nopasswd") -> Iterator[SshHost]:
    """``host`` as seen by a new non-root user who logs in with the pool's key (put in its
    ~/.ssh/authorized_keys, which the pool's sshd reads after its own). sudo: "nopasswd" gives it
    passwordless sudo,
    "password" a sudo rule that asks for a password (it has none, so `sudo -n` refuses), None no
    rule. The user and the rule exist on this machine (the hosts share its /etc) and are removed
    afterwards: the user by name (ours: it carries our PID), the rule file by its path."""
    global _USERS_MADE
    k, _USERS_MADE = _USERS_MADE, _USERS_MADE + 1
    name = f"slab{os.getpid() % 100000}u{k}"
    rule = Path(f"/etc/sudoers.d/socketlab-test-{name}")
    # a home of its own: without one sshd writes "Could not chdir" into every session's output
    # password "*": none can be typed, yet not "!" (locked), which sshd refuses keys for too
    _run("useradd", "--create-home", "--shell", "/bin/sh", "--password", "*", name)
    try:
        ssh_dir = Path(os.path.expanduser(f"~{name}")) / ".ssh"
        ssh_dir.mkdir(mode=0o700)
        (ssh_dir / "authorized_keys").write_text(host.key_file.with_suffix(".pub").read_text())
        for path in (ssh_dir, ssh_dir / "authorized_keys"):
            shutil.chown(path, name, name)
        if sudo is not None:
            tag = {"nopasswd": "NOPASSWD: ", "password": ""}[sudo]
            text = f"{name} ALL=(ALL) {tag}ALL\n"
            staged = rule.with_name(f".{rule.name}.tmp")  # sudo skips names with a dot
            staged.write_text(text)
            os.chmod(staged, 0o440)
            _run("visudo", "-c", "-q", "-f", str(staged))  # a broken rule would break all sudo
            os.replace(staged, rule)
        yield dataclasses.replace(host, user=name)
    finally:
        rule.unlink(missing_ok=True)
        rule.with_name(f".{rule.name}.tmp").unlink(missing_ok=True)
        # userdel refuses (exit 8) while a session of the user is still closing
        deadline = time.monotonic() + 30
        while subprocess.run(["userdel", "--remove", name], capture_output=True).returncode == 8:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)


@contextlib.contextmanager
def ssh_hosts(count: int, workdir: Path | None = None) -> Iterator[SshHostPool]:
    pool = SshHostPool(workdir)
    try:
        for _ in range(count):
            pool.add()
        yield pool
    finally:
        pool.close()
