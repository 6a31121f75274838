"""The connection to a host as the user's SSH would make it.

fabric's own config loading reads /etc/ssh/ssh_config and ~/.ssh/config: Host aliases
(HostName), User, Port, IdentityFile, ProxyJump (a chain of gateway connections) and
ProxyCommand; paramiko uses the ssh-agent (SSH_AUTH_SOCK) and the default key files as ssh does.
On top of that, the inventory: ansible_host/ansible_port/ansible_user/ansible_ssh_private_key_file,
and what ansible_ssh_common_args / ansible_ssh_extra_args say with -o Key=Value, -J, -i, -p and -l
(the playbooks' OpenSSH honours them, so orchestrate does too; the inventory wins over
~/.ssh/config, as ssh's command line does). Host keys: the known_hosts files ssh would read
(UserKnownHostsFile from the inventory or ~/.ssh/config, else ~/.ssh/known_hosts), a changed
key refused, a new one accepted (StrictHostKeyChecking=accept-new).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import socket

from fabric import Config, Connection

log = logging.getLogger(__name__)

#: ssh -o options (lower case) that shape the connection; others are left to OpenSSH alone
HONOURED = (
    "hostname",
    "user",
    "port",
    "identityfile",
    "proxyjump",
    "proxycommand",
    "userknownhostsfile",
)
_FLAGS = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}


def ssh_options(args: str | None) -> dict[str, list[str]]:
    """ssh command-line options as ssh_config keys: ``-o ProxyJump=b -i k`` ->
    {"proxyjump": ["b"], "identityfile": ["k"]}. Values in the order given."""
    words, out = shlex.split(args or ""), dict[str, list[str]]()
    i = 0
    while i < len(words):
        word, value = words[i], None
        if word == "-o" and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
        elif word in _FLAGS and i + 1 < len(words):
            out.setdefault(_FLAGS[word], []).append(words[i + 1])
            i += 2
            continue
        if value is not None:
            key, _, val = value.replace("=", " ", 1).partition(" ")
            if key.lower() in HONOURED and val.strip():
                out.setdefault(key.lower(), []).append(val.strip())
        i += 1
    return out


def _keepalive(sock: socket.socket) -> None:
    """A host that vanishes shows within seconds, not after the kernel's minutes."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle waits
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 6000)


def _chain(conn: Connection) -> list[Connection]:
    """The connection and its gateway connections, outermost hop last."""
    out = [conn]
    while isinstance(out[-1].gateway, Connection):
        out.append(out[-1].gateway)
    return out


def _known_hosts(conn: Connection, extra: list[str]) -> None:
    """Load the known_hosts files ssh would read for this connection into its client."""
    files = extra or conn.ssh_config.get("userknownhostsfile", "").split()
    files = files or ["~/.ssh/known_hosts"]
    for name in files:
        with contextlib.suppress(OSError):  # a missing file is fine: the key is added on contact
            conn.client.get_host_keys().load(os.path.expanduser(name))


def connection(
    address: str,
    *,
    user: str | None,
    port: int | None,
    key_file: str | None,
    common_args: str,
    connect_timeout: float,
) -> Connection:
    """An unopened fabric Connection to ``address`` (an inventory host's ansible_host or name)."""
    opts = ssh_options(common_args)
    config = Config()  # loads the ssh_config files (fabric's runtime/user/system paths)
    gateway = None
    if "proxyjump" in opts:  # hops outermost last; each hop's own ~/.ssh/config entry applies
        for hop in reversed(opts["proxyjump"][0].split(",")):
            gateway = Connection(hop, config=config.clone(), gateway=gateway)
    elif "proxycommand" in opts:
        gateway = opts["proxycommand"][0]
    keys = [*([key_file] if key_file else []), *opts.get("identityfile", [])]
    kwargs: dict[str, object] = {"banner_timeout": connect_timeout, "auth_timeout": connect_timeout}
    if keys:
        kwargs["key_filename"] = [os.path.expanduser(k) for k in keys]
    conn = Connection(
        opts.get("hostname", [address])[0],
        user=user or opts.get("user", [None])[0],
        port=int(port or opts.get("port", [0])[0]) or None,
        config=config,
        gateway=gateway,
        connect_timeout=connect_timeout,
        connect_kwargs=kwargs,
    )
    for hop in _chain(conn):
        _known_hosts(hop, opts.get("userknownhostsfile", []) if hop is conn else [])
    log.debug(
        "ssh %s: %s@%s:%s%s, keys %s, agent %s",
        address,
        conn.user,
        conn.host,
        conn.port,
        f" via {describe_gateway(conn)}" if conn.gateway else "",
        conn.connect_kwargs.get("key_filename") or "(ssh's defaults)",
        "yes" if os.environ.get("SSH_AUTH_SOCK") else "no",
    )
    return conn


def describe_gateway(conn: Connection) -> str:
    if isinstance(conn.gateway, str):
        return f"ProxyCommand {conn.gateway}"
    return "ProxyJump " + ",".join(f"{h.user}@{h.host}:{h.port}" for h in _chain(conn)[1:][::-1])


def open_connection(conn: Connection, connect_timeout: float) -> None:
    """Open it with keepalive on the TCP socket that leaves this machine: our own socket for a
    direct connection, the first hop's for a ProxyJump chain."""
    if not conn.gateway:
        sock = socket.create_connection((conn.host, int(conn.port)), timeout=connect_timeout)
        _keepalive(sock)
        conn.connect_kwargs["sock"] = sock
        conn.open()
        return
    conn.open()
    first = _chain(conn)[-1]
    if first.transport is not None and isinstance(first.transport.sock, socket.socket):
        _keepalive(first.transport.sock)


def run_once(
    address: str,
    command: str,
    stdin: bytes,
    *,
    user: str | None,
    port: int | None,
    key_file: str | None,
    common_args: str,
    timeout: float,
) -> tuple[int, str, str]:
    """One command over its own connection, ``stdin`` sent to it: (exit status, stdout,
    stderr). For fact gathering, before any executor exists; TimeoutError past ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    conn = connection(
        address,
        user=user,
        port=port,
        key_file=key_file,
        common_args=common_args,
        connect_timeout=min(10.0, timeout),
    )
    try:
        open_connection(conn, min(10.0, timeout))
        chan = conn.transport.open_session(timeout=min(10.0, timeout))
        chan.exec_command(command)
        chan.sendall(stdin)
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        while not (
            chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(command)
            if chan.recv_ready():
                out += chan.recv(1 << 16)
            elif chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 16)
            else:
                time.sleep(0.01)
        return (
            chan.recv_exit_status(),
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )
    finally:
        with contextlib.suppress(Exception):  # closing a half-open connection may raise anything
            conn.close()
