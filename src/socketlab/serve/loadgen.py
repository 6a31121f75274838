"""Streaming OpenAI-compatible load generator (asyncio + httpx).

One HTTP connection per in-flight request, timestamps taken with ``perf_counter_ns`` as bytes
arrive, raw per-request records kept (``records.RequestRecord``). Load shapes: closed loop with
C workers and zero think time, or an open loop with a pre-generated, seeded Poisson (gamma when
``burstiness`` != 1) schedule. Warm-up requests use prompts that the measured phase never reuses,
so a prefix cache cannot serve them (vLLM's warm-up repeats the first prompt).

Run as ``python -m socketlab.serve.loadgen CONFIG.json OUTDIR`` to load from a separate process
pinned to CPUs the server does not use; the orchestrator does that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from socketlab.serve.records import RequestRecord

now = time.perf_counter_ns


@dataclass
class Prompt:
    id: str
    text: str
    n_in: int | None = None  #: token count from the prompt source, if known


@dataclass
class LoadConfig:
    base_url: str
    endpoint: str = "/v1/completions"  #: or /v1/chat/completions
    model: str | None = None
    concurrency: int | None = None  #: closed loop with this many workers
    rate: float | None = None  #: open loop: mean requests per second
    burstiness: float = 1.0  #: gamma shape of the gaps; 1 = Poisson
    max_concurrency: int | None = None  #: optional cap in open loop
    seed: int = 0
    max_tokens: int = 16
    body: dict[str, Any] = field(default_factory=dict)  #: extra request fields (logit_bias...)
    timeout_s: float = 300.0
    cpus: list[int] | None = None  #: pin the client here (the calling thread, for the run)

    def label(self) -> str:
        return f"c{self.concurrency}" if self.concurrency else f"r{self.rate:g}"


@dataclass
class LoadResult:
    records: list[RequestRecord]
    window: tuple[int, int]
    meta: dict[str, Any]


def request_body(cfg: LoadConfig, prompt: Prompt) -> dict[str, Any]:
    body: dict[str, Any] = {
        "stream": True,
        "max_tokens": cfg.max_tokens,
        "stream_options": {"include_usage": True},
    }
    if cfg.model:
        body["model"] = cfg.model
    if cfg.endpoint.rstrip("/").endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    body.update(cfg.body)
    return body


def _output_of(choice: dict[str, Any]) -> bool:
    """Whether a choice carries an output token (content, reasoning or a tool call).

    A token whose text is still buffered (part of a UTF-8 sequence, or the leading space that
    llama.cpp strips from the first piece) arrives as an empty string: it counts, unless the
    chunk is only the end marker (finish_reason set) or the role prelude of a chat stream.
    """
    done = choice.get("finish_reason") is not None
    if "text" in choice:
        text = choice["text"]
        return bool(text) or (text == "" and not done)
    delta = choice.get("delta") or {}
    if (
        delta.get("content")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
    ):
        return True
    return delta.get("content") == "" and "role" not in delta and not done


class _Stream:
    """SSE parser for one response; splits events on blank lines, skips comments."""

    def __init__(self, rec: RequestRecord):
        self.rec = rec
        self.buf = b""
        self.usage_out = 0  #: cumulative completion tokens seen in per-chunk usage

    def feed(self, data: bytes, t: int) -> None:
        self.buf += data
        if b"\r" in self.buf:
            self.buf = self.buf.replace(b"\r\n", b"\n")
        while (i := self.buf.find(b"\n\n")) >= 0:
            raw, self.buf = self.buf[:i], self.buf[i + 2 :]
            self._event(raw, t)

    def _event(self, raw: bytes, t: int) -> None:
        payload = b"".join(
            line[5:].lstrip() for line in raw.split(b"\n") if line.startswith(b"data:")
        )
        if not payload:
            return
        rec = self.rec
        if rec.t_first_byte is None:
            rec.t_first_byte = t
        if payload == b"[DONE]":
            rec.t_done = t
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            rec.status, rec.error = "error", f"bad SSE data: {payload[:80]!r}"
            return
        if obj.get("error"):
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            rec.status, rec.error = "error", f"stream error: {str(msg)[:160]}"
            return
        usage = obj.get("usage") or None
        choices = obj.get("choices") or []
        if any(_output_of(c) for c in choices):
            n = 1
            if usage and usage.get("completion_tokens") is not None:
                # vLLM continuous usage stats: the growth is this event's token count
                n = max(int(usage["completion_tokens"]) - self.usage_out, 1)
            rec.events.append([t, n])
            self.usage_out += n
            if "x_ts_ns" in obj:
                if rec.server_ts_ns is None:
                    rec.server_ts_ns = []
                rec.server_ts_ns.append(obj["x_ts_ns"])
        for c in choices:
            if c.get("finish_reason"):
                rec.finish_reason = c["finish_reason"]
        if usage:
            if usage.get("completion_tokens") is not None:
                rec.n_out, rec.n_out_source = int(usage["completion_tokens"]), "usage"
                self.usage_out = rec.n_out
            if usage.get("prompt_tokens") is not None:
                rec.n_in = int(usage["prompt_tokens"])


async def one_request(
    client: httpx.AsyncClient, cfg: LoadConfig, prompt: Prompt, rec: RequestRecord, t0: int
) -> None:
    async def trace(event: str, info: dict) -> None:
        # httpcore calls this just before the request line and headers are written on an
        # open connection: the send time of measurement.md §D.b (pool waits excluded).
        if event == "http11.send_request_headers.started":
            rec.t_send = now() - t0

    req = client.build_request(
        "POST",
        cfg.base_url.rstrip("/") + cfg.endpoint,
        json=request_body(cfg, prompt),
        extensions={"trace": trace},
    )
    rec.prompt_id, rec.n_in = prompt.id, prompt.n_in
    parser = _Stream(rec)
    rec.t_send = now() - t0  # replaced by the trace hook once the bytes go out
    try:
        resp = await client.send(req, stream=True)
        try:
            rec.http_status = resp.status_code
            if resp.status_code != 200:
                body = (await resp.aread())[:200].decode(errors="replace").strip()
                rec.status, rec.error = "error", f"HTTP {resp.status_code}: {body}"
                return
            async for data in resp.aiter_raw():
                parser.feed(data, now() - t0)
        finally:
            await resp.aclose()
    except httpx.HTTPError as exc:
        where = f"after {sum(n for _, n in rec.events)} tokens" if rec.events else "before output"
        rec.status = "error"
        rec.error = f"{type(exc).__name__} {where}: {str(exc)[:120] or 'no detail'}"
        return
    if rec.status == "error":
        return
    if rec.n_out is None:
        rec.n_out = sum(n for _, n in rec.events)
    if not rec.events:
        rec.status, rec.error = "error", "no output tokens in the stream"
    elif rec.t_done is None and rec.finish_reason is None:
        rec.status = "incomplete"
        rec.error = f"stream ended without [DONE] after {rec.n_out} tokens"
    else:
        rec.status = "ok"


def poisson_offsets(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seeded arrival offsets in seconds (gamma gaps with mean 1/rate; shape 1 = Poisson)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return out


async def _lag_monitor(samples: list[int], stop: asyncio.Event, period_ns: int = 10_000_000):
    while not stop.is_set():
        t = now()
        await asyncio.sleep(period_ns / 1e9)
        samples.append(now() - t - period_ns)


async def _closed(client, cfg, prompts, phase, records, t0) -> int | None:
    queue = deque(prompts)
    drain: list[int] = []

    async def worker() -> None:
        t_free = now() - t0
        while queue:
            p = queue.popleft()
            rec = RequestRecord(index=len(records), phase=phase, t_sched=t_free)
            records.append(rec)
            await one_request(client, cfg, p, rec, t0)
            t_free = now() - t0
        drain.append(now() - t0)  # this worker found no work: the drain has begun

    await asyncio.gather(*(worker() for _ in range(max(1, cfg.concurrency or 1))))
    return min(drain) if drain else None


async def _open(client, cfg, prompts, phase, records, t0) -> tuple[int, int]:
    offsets = poisson_offsets(len(prompts), cfg.rate, cfg.burstiness, cfg.seed)
    sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
    base = now() - t0 + 1_000_000  # 1 ms to set up
    tasks = []

    async def fire(p: Prompt, rec: RequestRecord) -> None:
        if sem is None:
            await one_request(client, cfg, p, rec, t0)
            return
        async with sem:
            await one_request(client, cfg, p, rec, t0)

    for p, off in zip(prompts, offsets, strict=True):
        t_sched = base + int(off * 1e9)
        delay = (t_sched - (now() - t0)) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        rec = RequestRecord(index=len(records), phase=phase, t_sched=t_sched)
        records.append(rec)
        tasks.append(asyncio.create_task(fire(p, rec)))
    await asyncio.gather(*tasks)
    return base, base + int(offsets[-1] * 1e9)


async def run_load_async(
    cfg: LoadConfig, warmup: list[Prompt], measured: list[Prompt]
) -> LoadResult:
    if bool(cfg.concurrency) == bool(cfg.rate):
        raise ValueError("LoadConfig needs exactly one of concurrency or rate")
    n_conn = (cfg.concurrency or cfg.max_concurrency or len(measured)) + 4
    limits = httpx.Limits(max_connections=n_conn, max_keepalive_connections=n_conn)
    timeout = httpx.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, 30.0))
    records: list[RequestRecord] = []
    lag: list[int] = []
    stop = asyncio.Event()
    t0 = now()
    wall0 = time.time()
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        if warmup:
            wcfg = (
                cfg
                if cfg.concurrency
                else LoadConfig(
                    **{**asdict(cfg), "rate": None, "concurrency": cfg.max_concurrency or 1}
                )
            )
            await _closed(client, wcfg, warmup, "warmup", records, t0)
        monitor = asyncio.create_task(_lag_monitor(lag, stop))
        first = len(records)
        ru0, m0 = resource.getrusage(resource.RUSAGE_THREAD), now()  # measured phase only
        if cfg.concurrency:
            drain = await _closed(client, cfg, measured, "measured", records, t0)
            sends = [r.t_send for r in records[first:] if r.t_send is not None]
            window = (min(sends, default=0), drain or 0)
        else:
            window = await _open(client, cfg, measured, "measured", records, t0)
        stop.set()
        await monitor
    ru1, m1 = resource.getrusage(resource.RUSAGE_THREAD), now()
    if window[1] <= window[0]:  # one request, or a degenerate schedule: whole measured run
        ms = records[first:]
        window = (
            min((r.t_send for r in ms if r.t_send is not None), default=0),
            max((r.t_end or r.t_send or 0 for r in ms), default=0),
        )
    lag_sorted = sorted(lag)
    short = sum(1 for r in records[first:] if r.ok and (r.n_out or 0) < 0.9 * cfg.max_tokens)
    meta = {
        "label": cfg.label(),
        "t0_wall": wall0,
        "t0_ns": t0,  # perf_counter_ns origin of every record time
        "client_pid": os.getpid(),
        "client_cpus": sorted(os.sched_getaffinity(0)),
        # CPU of the event-loop thread over the measured phase, and per second of it (near
        # 1.0 = the client, not the server, sets the pace)
        "client_cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        "client_cpu_per_s": ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
        / max((m1 - m0) / 1e9, 1e-9),
        "event_loop_lag_p99_ms": (
            lag_sorted[int(0.99 * (len(lag_sorted) - 1))] / 1e6 if lag_sorted else None
        ),
        "short_outputs": short,  # fixed-OSL guard (MLPerf): N_out < 90% of max_tokens
        "httpx_version": httpx.__version__,
        "config": asdict(cfg),
    }
    return LoadResult(records, window, meta)


def run_load(cfg: LoadConfig, warmup: list[Prompt], measured: list[Prompt]) -> LoadResult:
    """Run one load point; the calling thread is pinned to ``cfg.cpus`` for the run only."""
    old = os.sched_getaffinity(0)
    if cfg.cpus:
        os.sched_setaffinity(0, cfg.cpus)
    try:
        return asyncio.run(run_load_async(cfg, warmup, measured))
    finally:
        if cfg.cpus:
            os.sched_setaffinity(0, old)


def write_result(result: LoadResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "requests.jsonl", "w") as f:
        for r in result.records:
            f.write(json.dumps(r.to_json(), separators=(",", ":")) + "\n")
    (out / "loadgen.json").write_text(
        json.dumps({"window": list(result.window), "meta": result.meta}, indent=1)
    )


def read_result(out: Path) -> LoadResult:
    recs = [
        RequestRecord.from_json(json.loads(line))
        for line in (out / "requests.jsonl").read_text().splitlines()
        if line
    ]
    doc = json.loads((out / "loadgen.json").read_text())
    return LoadResult(recs, tuple(doc["window"]), doc["meta"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m socketlab.serve.loadgen",
        description="Run one load point from a JSON config.",
    )
    ap.add_argument(
        "config",
        type=Path,
        help='{"load": LoadConfig fields, "warmup": [Prompt], "measured": [Prompt]}',
    )
    ap.add_argument("out", type=Path, help="folder for requests.jsonl and loadgen.json")
    args = ap.parse_args(argv)
    doc = json.loads(args.config.read_text())
    cfg = LoadConfig(**doc["load"])
    result = run_load(
        cfg, [Prompt(**p) for p in doc["warmup"]], [Prompt(**p) for p in doc["measured"]]
    )
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
