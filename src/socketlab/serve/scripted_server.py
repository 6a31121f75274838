"""A scripted OpenAI-compatible streaming endpoint with known timing, for tests and benchmarks.

Token k of a response is written at ``t_recv + first_ms + k * every_ms``, where t_recv is when
the request's first bytes arrived (absolute deadlines, so sleep overshoot does not accumulate).
Each chunk carries ``x_ts_ns``, the server's perf_counter_ns at the write (CLOCK_MONOTONIC,
comparable with a client on the same host). It is a raw socket server with minimal HTTP/1.1
parsing (keep-alive, chunked responses, TCP_NODELAY) so its own overhead stays in the tens of
microseconds, which http.server does not manage.

Failure modes make the failure paths of the serving runner testable with a real process:
``--never-ready`` (readiness answers 503 forever), ``--http-error CODE`` (every completion gets
CODE), ``--die-after N`` (the process exits with code 3 in the middle of request N+1's stream),
``--spawn-child`` (a ``sleep`` child in the same process group, to prove the group is stopped).

``python -m socketlab.serve.scripted_server --port 0 --port-file F`` writes the bound port to F.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

_served = 0
_lock = threading.Lock()


def _read_request(conn: socket.socket, buf: bytes) -> tuple[int, str, str, bytes, bytes] | None:
    """(t_recv, method, path, body, rest of buffer), or None when the peer closed."""
    t_recv = time.perf_counter_ns() if buf else 0
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        if not buf:
            t_recv = time.perf_counter_ns()
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, path = lines[0].split(" ")[:2]
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(buf) < length:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    return t_recv, method, path, buf[:length], buf[length:]


def _respond_json(conn: socket.socket, code: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    conn.sendall(
        b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (code, len(data), data)
    )


def _frame(obj: dict | str) -> bytes:
    data = b"data: " + (obj if isinstance(obj, str) else json.dumps(obj)).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(conn: socket.socket, obj: dict | str) -> None:
    conn.sendall(_frame(obj))


def _stream(conn: socket.socket, opts, t_recv: int, path: str, body: dict, n_served: int) -> None:
    chat = path.rstrip("/").endswith("chat/completions")
    prompt = (
        (body.get("messages") or [{}])[-1].get("content", "") if chat else body.get("prompt", "")
    )
    n_in = len(str(prompt).split())
    n = int(opts.tokens or body.get("max_tokens") or 16)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    first, every = opts.first_ms * 1e6, opts.every_ms * 1e6
    pending: list[bytes] = []
    for k in range(n):
        if opts.die_after is not None and n_served > opts.die_after and k == n // 2:
            os._exit(3)
        delay = (t_recv + first + k * every - time.perf_counter_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        text = f" t{k}"
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        choice["finish_reason"] = "length" if k == n - 1 else None
        pending.append(
            _frame(
                {
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "choices": [choice],
                    "x_ts_ns": time.perf_counter_ns(),
                }
            )
        )
        if len(pending) >= opts.batch or k == n - 1:  # --batch: fewer writes, same events
            conn.sendall(b"".join(pending))
            pending.clear()
    _chunk(
        conn,
        {
            "choices": [],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n},
        },
    )
    _chunk(conn, "[DONE]")
    conn.sendall(b"0\r\n\r\n")


def _serve_connection(conn: socket.socket, opts) -> None:
    global _served
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    with conn:
        while True:
            req = _read_request(conn, buf)
            if req is None:
                return
            t_recv, method, path, raw, buf = req
            if method == "GET":
                if opts.never_ready:
                    _respond_json(conn, 503, {"error": "loading"})
                elif path in ("/v1/models", "/health"):
                    _respond_json(conn, 200, {"object": "list", "data": [{"id": "scripted"}]})
                else:
                    _respond_json(conn, 404, {"error": "not found"})
                continue
            if opts.http_error:
                _respond_json(conn, opts.http_error, {"error": {"message": "scripted failure"}})
                continue
            with _lock:
                _served += 1
                n_served = _served
            _stream(conn, opts, t_recv, path, json.loads(raw or b"{}"), n_served)


def launch(
    args: list[str], port_file: Path, *, preexec_fn=None, timeout_s: float = 20.0
) -> tuple[subprocess.Popen, str]:
    """Start this endpoint as a process (own session) with ``args``; returns it and its base URL
    once it listens. On failure it is stopped by PID before the error is raised."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "socketlab.serve.scripted_server",
            "--port-file",
            str(port_file),
            *args,
        ],
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    deadline = time.monotonic() + timeout_s
    while not port_file.exists():
        rc = proc.poll()
        if rc is not None or time.monotonic() > deadline:
            if rc is None:
                proc.kill()
                proc.wait(timeout=10)
            why = (
                f"exited with code {rc}"
                if rc is not None
                else f"not listening after {timeout_s:g} s"
            )
            raise RuntimeError(f"scripted endpoint {why} (args {args})")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m socketlab.serve.scripted_server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", type=Path)
    ap.add_argument("--first-ms", type=float, default=0.0, help="delay of the first token")
    ap.add_argument("--every-ms", type=float, default=0.0, help="gap between later tokens")
    ap.add_argument("--tokens", type=int, default=0, help="tokens per response (0: max_tokens)")
    ap.add_argument(
        "--batch",
        type=int,
        default=1,
        help="token events per socket write (a faster endpoint for benchmarks)",
    )
    ap.add_argument("--never-ready", action="store_true")
    ap.add_argument("--http-error", type=int, default=0)
    ap.add_argument("--die-after", type=int, default=None)
    ap.add_argument("--spawn-child", action="store_true")
    ap.add_argument("--startup-s", type=float, default=0.0, help="sleep before listening")
    opts = ap.parse_args(argv)
    if opts.spawn_child:
        subprocess.Popen(["sleep", "600"])  # stays in our process group
    time.sleep(opts.startup_s)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((opts.host, opts.port))
    sock.listen(256)
    port = sock.getsockname()[1]
    if opts.port_file:
        tmp = opts.port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        tmp.replace(opts.port_file)
    print(f"listening on {opts.host}:{port}", flush=True)
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=_serve_connection, args=(conn, opts), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
