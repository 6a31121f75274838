"""A real AWS-compatible endpoint for tests: moto's server over HTTP, plus SSH for its instances.

`moto_server` starts .venv/bin/moto_server on a free localhost port with instance-type validation
on (so a typo in an instance type fails like on AWS) and stops it by its PID.

`loopback_sshd` gives the instances moto "launches" something real to be ready: moto assigns
private IPs from the subnet's CIDR (first usable .4), so a campaign network of 127.0.0.0/24 makes
them 127.0.0.4, .5, ... and an sshd listening on those loopback addresses answers for them.

`planted_env` / `files_containing` / `objects_containing` plant a fake AWS secret in the
environment of the commands under test and look for it in everything they wrote.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MOTO_SERVER = Path(sys.executable).with_name("moto_server")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout:g} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@dataclass(frozen=True)
class MotoServer:
    url: str
    pid: int
    log: Path


@contextlib.contextmanager
def moto_server(workdir: Path) -> Iterator[MotoServer]:
    port = free_port()
    log_path = workdir / "moto_server.log"
    env = {**os.environ, "MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        _wait_port("127.0.0.1", port, 60, proc, "moto_server")
        yield MotoServer(f"http://127.0.0.1:{port}", proc.pid, log_path)
    finally:
        _stop(proc)


@dataclass(frozen=True)
class LoopbackSshd:
    addresses: tuple[str, ...]
    port: int
    key_file: Path  #: private key authorized for root
    pid: int


@contextlib.contextmanager
def loopback_sshd(
    workdir: Path, addresses: list[str], authorize: bool = True
) -> Iterator[LoopbackSshd]:
    """An sshd on these 127.x addresses; with authorize=False no key may log in."""
    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "id_ed25519"
    hostkey = workdir / "hostkey"
    for path in (key, hostkey):
        if not path.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                check=True,
                capture_output=True,
            )
    auth = workdir / "authorized_keys"
    auth.write_text((workdir / "id_ed25519.pub").read_text() if authorize else "")
    os.chmod(auth, 0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    port = free_port()
    conf = workdir / "sshd.conf"
    conf.write_text(
        "".join(f"ListenAddress {a}\n" for a in addresses)
        + f"Port {port}\nHostKey {hostkey}\nPidFile {workdir}/sshd.pid\n"
        f"AuthorizedKeysFile {auth}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\nMaxStartups 100:30:200\n"
    )
    with open(workdir / "sshd.log", "wb") as log:
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_port(addresses[0], port, 15, proc, "sshd")
        yield LoopbackSshd(tuple(addresses), port, key, proc.pid)
    finally:
        _stop(proc)


# -- the planted-secret check ------------------------------------------------------------------


def planted_env(work: Path, key_id: str, secret: str, **extra: str) -> dict[str, str]:
    """This environment without any AWS_/ANSIBLE_/SOCKETLAB_ setting of the caller's, plus a
    fake key pair (the secret is the value no file may ever contain) and no AWS config files."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ANSIBLE_", "SOCKETLAB_"))
    }
    env.update(
        AWS_ACCESS_KEY_ID=key_id,
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_CONFIG_FILE=str(work / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(work / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",  # no instance-role lookup: only the planted key
        **extra,
    )
    return env


def aws_client(service: str, url: str, key_id: str, secret: str, region: str = "us-east-1"):
    """A boto3 client of the moto server at ``url``, signing with the planted key pair."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
    )


def run_logged(
    work: Path, env: dict[str, str], argv: list[str], timeout: float = 240
) -> subprocess.CompletedProcess:
    """Run ``argv`` from the repo root; its output is kept in work/transcript.txt too, which the
    secret scan (files_containing) reads."""
    p = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    with open(work / "transcript.txt", "a") as fh:
        fh.write(f"$ {' '.join(argv)}\n{p.stdout}\n{p.stderr}\nrc={p.returncode}\n")
    return p


def readable(name: str, data: bytes) -> bytes:
    """What a reader of this file or object would see: Parquet parts as their rows and .tar.gz
    bundles as their members' names and contents (compressed bytes would hide a secret)."""
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return repr(pq.read_table(io.BytesIO(data)).to_pylist()).encode()
    if name.endswith((".tar.gz", ".tgz")):
        out = []
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                out.append(member.name.encode())
                fh = tar.extractfile(member)
                if fh is not None:
                    out.append(fh.read())
        return b"\n".join(out)
    return data


def files_containing(root: Path, secret: str) -> list[str]:
    """Every file under root in which the secret can be read."""
    return sorted(
        str(f)
        for f in root.rglob("*")
        if f.is_file() and secret.encode() in readable(f.name, f.read_bytes())
    )


def objects_containing(s3, bucket: str, secret: str) -> list[str]:
    """Every object of the bucket in which the secret can be read."""
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    ]
    return sorted(
        k
        for k in keys
        if secret.encode() in readable(k, s3.get_object(Bucket=bucket, Key=k)["Body"].read())
    )


def cloud_fixtures(name: str, loopback: list[str]):
    """The module fixtures the cloud test files share: a work folder named ``name``, a moto server
    in it and a loopback sshd answering on ``loopback``; assign them to the same names in the
    test module (``work, moto, sshd = cloud_fixtures(...)``)."""
    import pytest

    @pytest.fixture(scope="module")
    def work(tmp_path_factory) -> Path:
        return tmp_path_factory.mktemp(name)

    @pytest.fixture(scope="module")
    def moto(work):
        with moto_server(work) as server:
            yield server

    @pytest.fixture(scope="module")
    def sshd(work):
        with loopback_sshd(work / "sshd", loopback) as server:
            yield server

    return work, moto, sshd
