"""Opens an SSH host in one session: the orchestrator (socketlab.execute.ssh) sends this file's
text as the command, ``python3 -I -S -c <this file> TOOLS SHA256 [options]``, so that checking
sudo, reading the host's facts, installing the tools and starting the agent cost one login
shell and one channel, not six. Stdlib only, Python 3.9; one JSON line per step on stdout.

1. ``--become``: ``sudo -n true`` must work, else ``{"boot": "become-refused"}`` and exit 97;
2. ``--facts [--state-dir DIR]``: a line "<size>" and that many bytes of collectors/
   host_facts.py come on stdin; it runs here, in memory, as the login user, and its snapshot
   goes back as ``{"facts": ...}``. Then the orchestrator plans; a line "go" continues, and
   EOF (the plan failed, or the host has nothing to run) ends the session. Up to here nothing
   is written on the host;
3. ``{"boot": "have"}`` when TOOLS/.sha256 says SHA256, else ``{"boot": "need"}``: then a line
   "<size>" and a tar of that size come on stdin; each file is written beside its place and
   renamed over it (a tool another orchestrator is running is never seen half-written), and
   .sha256 last;
4. the agent, TOOLS/_runwrap.py ``serve --idle S``: in this process, or root's through
   ``sudo -n`` with ``--become``, on the same stdin and stdout.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile

BECOME_REFUSED = 97


def say(data):
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def read_exact(size):
    chunks = []
    while size:
        chunk = os.read(0, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the orchestrator closed the channel")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_line():
    line = b""
    while not line.endswith(b"\n"):
        line += read_exact(1)
    return line.strip()


def facts(state_dir):
    """collectors/host_facts.py, sent on stdin, run in memory: its snapshot."""
    source = read_exact(int(read_line())).decode()
    namespace = {"__name__": "host_facts"}
    exec(compile(source, "host_facts.py", "exec"), namespace)
    return namespace["snapshot"]("/", state_dir or namespace["STATE_DIR"])


def install(tools, sha, data):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if not member.isfile() or member.name.startswith("/") or ".." in parts:
                raise ValueError(f"unexpected member in the tools: {member.name!r}")
            dest = os.path.join(tools, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            write(dest, tar.extractfile(member).read())
    write(os.path.join(tools, ".sha256"), sha.encode())


def write(dest, data):
    staged = f"{dest}.new-{os.getpid()}"
    with open(staged, "wb") as fh:
        fh.write(data)
    os.replace(staged, dest)


def main(argv):
    parser = argparse.ArgumentParser(prog="_boot.py")
    parser.add_argument("tools")
    parser.add_argument("sha256")
    parser.add_argument("--become", action="store_true")
    parser.add_argument("--facts", action="store_true")
    parser.add_argument("--state-dir")
    parser.add_argument("--idle", default="30")
    args = parser.parse_args(argv)
    if args.become:
        refused = subprocess.call(
            ["sudo", "-n", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if refused:
            say({"boot": "become-refused"})
            return BECOME_REFUSED
    if args.facts:
        try:
            snapshot = facts(args.state_dir)
        except EOFError:
            return 0
        except Exception as exc:  # noqa: BLE001 - one line for the orchestrator, not a trace
            say({"error": f"host_facts: {type(exc).__name__}: {exc}"})
            return 1
        say({"facts": snapshot})
        try:
            if read_line() != b"go":
                return 0
        except EOFError:  # the orchestrator has nothing for this host: nothing was written
            return 0
    try:
        with open(os.path.join(args.tools, ".sha256")) as fh:
            have = fh.read().strip() == args.sha256
    except OSError:
        have = False
    say({"boot": "have" if have else "need"})
    if not have:
        install(args.tools, args.sha256, read_exact(int(read_line())))
    agent = os.path.join(args.tools, "_runwrap.py")
    if args.become:  # -n: fail at once, never ask a password (checked above)
        os.execvp(
            "sudo",
            ["sudo", "-n", "--", sys.executable, "-I", "-S", agent, "serve", "--idle", args.idle],
        )
    sys.path.insert(0, args.tools)
    import _runwrap

    return _runwrap.main(["serve", "--idle", args.idle])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
