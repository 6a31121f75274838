"""The serving kind: one serving run end to end, ``run(context, point)`` (socketlab.runkinds).

Pick a free port on the host, start the arm's server there pinned to the point's CPUs in its
own process group (through the executor's agent: the same on this machine and on SSH hosts),
wait for readiness, start the server-side sampler beside it, then per load level make prompts,
run the load generator here as a separate process pinned to the client CPUs, compute the
metrics and check the server is still alive; finally always stop the sampler and the whole
server tree by PID. The outcome carries a status ("ok", "failed" or "invalid"), a one-line
reason, metrics (``socketlab.parse.Metric`` with a ``load`` dimension) and every request's
records; the runner stores them with the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.cpulist import format_cpulist, parse_cpulist
from socketlab.execute import process
from socketlab.hostside import procstats
from socketlab.parse import Metric
from socketlab.runkinds import Outcome, RunContext
from socketlab.serve import metrics as metrics_mod
from socketlab.serve.config import Level, ServingConfig
from socketlab.serve.dram import DramCounter
from socketlab.serve.loadgen import LoadConfig, LoadResult, Prompt, read_result
from socketlab.serve.prompts import PromptError, ServerTokenizer, corpus_prompts, synthetic_prompts
from socketlab.serve.records import RequestRecord
from socketlab.serve.server import Server, ServerFailure
from socketlab.store.status import RunStatus

PARSER = "serving/1"


@dataclass
class LevelResult:
    level: Level
    summary: dict[str, Any]
    records: list[RequestRecord]
    meta: dict[str, Any]


@dataclass
class ServingOutcome(Outcome):
    levels: list[LevelResult] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.status = RunStatus.FAILED
        self.reason = f"{self.reason}; {reason}" if self.reason else reason

    def invalid(self, reason: str) -> None:
        """The run finished but its numbers can't be trusted (a failure stays a failure)."""
        if self.status == RunStatus.OK:
            self.status = RunStatus.INVALID
        self.reason = f"{self.reason}; {reason}" if self.reason else reason


def health(level: Level, summary: dict[str, Any], output_tokens: int) -> str | None:
    """Why a level's numbers are not valid, or None (measurement.md §D.b generator health).

    Open loop: the dispatch delay p99 must stay below 1 ms or 1% of the mean gap, else the
    generator, not the server, shaped the arrivals. Any load: outputs shorter than 90% of the
    requested length (MLPerf's guard) mean the shape was not the one asked for.
    """
    if level.rate:
        limit = max(1.0, 10.0 / level.rate)  # ms: 1% of the mean gap of 1000/rate ms
        delay = summary.get("p99_queue_client_ms")
        if delay is not None and delay > limit:
            return (
                f"{level.label}: the load generator fell behind (dispatch delay p99 "
                f"{delay:.2f} ms > {limit:.2f} ms)"
            )
    short = sum(
        1
        for n, e in zip(summary["output_lens"], summary["errors"], strict=True)
        if not e and n < 0.9 * output_tokens
    )
    if short:
        return (
            f"{level.label}: {short} of {summary['completed']} outputs are shorter than 90% "
            f"of output_tokens {output_tokens} (set request.ignore_eos or suppress_token_ids)"
        )
    return None


def make_prompts(
    cfg: ServingConfig, level: Level, base_url: str, seed: int, rep: int
) -> tuple[list[Prompt], list[Prompt]]:
    """Warm-up and measured prompts for one level; tags make every prompt unique."""
    tag = f"{level.label}-r{rep}"
    if cfg.prompts == "synthetic":
        tok = ServerTokenizer(base_url, cfg.model)
        try:
            warm = synthetic_prompts(tok, cfg.warmup_requests, cfg.input_tokens, seed, f"w-{tag}")
            meas = synthetic_prompts(tok, cfg.requests, cfg.input_tokens, seed, f"m-{tag}")
        finally:
            tok.close()
        return warm, meas
    return (
        corpus_prompts(cfg.warmup_requests, cfg.input_tokens, seed, f"w-{tag}"),
        corpus_prompts(cfg.requests, cfg.input_tokens, seed, f"m-{tag}"),
    )


def run_level(
    cfg: ServingConfig,
    level: Level,
    base_url: str,
    client_cpus: list[int],
    out: Path,
    seed: int,
    rep: int,
    timeout_s: float,
) -> LevelResult:
    """One load level through ``python -m socketlab.serve.loadgen`` pinned to the client CPUs."""
    out.mkdir(parents=True, exist_ok=True)
    warm, meas = make_prompts(cfg, level, base_url, seed, rep)
    load = LoadConfig(
        base_url=base_url,
        endpoint=cfg.endpoint,
        model=cfg.model,
        concurrency=level.concurrency,
        rate=level.rate,
        burstiness=cfg.burstiness,
        max_concurrency=cfg.max_concurrency,
        seed=seed,
        max_tokens=cfg.output_tokens,
        body=cfg.request,
        timeout_s=cfg.request_timeout_s,
    )
    doc = {
        "load": vars(load),
        "warmup": [vars(p) for p in warm],
        "measured": [vars(p) for p in meas],
    }
    (out / "loadgen-config.json").write_text(json.dumps(doc, indent=1))
    with open(out / "loadgen.log", "wb") as log:
        try:
            proc = process.start(
                [
                    sys.executable,
                    "-m",
                    "socketlab.serve.loadgen",
                    str(out / "loadgen-config.json"),
                    str(out),
                ],
                cpus=client_cpus,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            raise ServerFailure(f"load generator could not start: {exc}") from None
        rc, timed_out = process.wait(proc, timeout_s)
        if timed_out:
            raise ServerFailure(f"load level {level.label} ran past {timeout_s:g} s")
    if rc != 0:
        tail = (out / "loadgen.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise ServerFailure(
            f"load generator failed at {level.label} with exit code {rc}: "
            f"{tail[0][:160] if tail else 'no output'}"
        )
    res: LoadResult = read_result(out)
    summary = metrics_mod.compute(res.records, cfg.slo, res.window)
    # vLLM's header fields with vLLM's meanings, so summary.json reads as a `vllm bench serve`
    # result (layout serve-start-times) and `orchestrate import-vllm` takes it back
    summary.update(
        date=time.strftime("%Y%m%d-%H%M%S"),
        backend="openai-chat" if cfg.endpoint.endswith("chat/completions") else "openai",
        model_id=cfg.model,
        request_rate=level.rate or "inf",
        burstiness=cfg.burstiness,
        max_concurrency=level.concurrency or cfg.max_concurrency,
        generator="socketlab.serve.loadgen",
    )
    summary.update(
        load=level.label,
        client_cpus=res.meta["client_cpus"],
        client_cpu_s=res.meta["client_cpu_s"],
        event_loop_lag_p99_ms=res.meta["event_loop_lag_p99_ms"],
        short_outputs=res.meta["short_outputs"],
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return LevelResult(level, summary, res.records, res.meta)


def _peak_in(samples: list[dict], t0: float, t1: float) -> int | None:
    vals = [s["pss_bytes"] for s in samples if "pss_bytes" in s and t0 <= s["t"] <= t1]
    return max(vals) if vals else None


def free_port(ex: Any) -> int:
    """A free TCP port on the host's server address, asked of the host itself."""
    code = (
        "import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); "
        "print(s.getsockname()[1])"
    )
    text = ex.check([ex.python, "-c", code, ex.address], timeout=30, what="picking a free port")
    return int(text.strip().splitlines()[-1])


def controller_cpus(wanted: list[int]) -> list[int]:
    """CPUs here for a load generator whose host-side list is ``wanted``: those of them this
    process may use, else all it may use (the controller's CPUs are not the host's)."""
    allowed = sorted(os.sched_getaffinity(0))
    return [c for c in wanted if c in allowed] or allowed


def _fill(text: str, port: int, address: str) -> str:
    """The arm's ``{port}`` and ``{address}`` placeholders filled in."""
    return text.replace("{port}", str(port)).replace("{address}", address)


def _client_on_controller(
    out: ServingOutcome, dram: DramCounter, point: Any, place: dict, client_cpus: list[int]
) -> list[int]:
    """The load generator runs here, not on the host: its CPUs are this machine's."""
    out.extra.update(
        client_on="controller", server_host=point.host, host_client_cpus=place["client_cpus"]
    )
    client_cpus = controller_cpus(client_cpus)
    out.extra["client_cpus"] = format_cpulist(client_cpus)
    # perf here would count this machine's memory traffic, not the host's
    dram.reason = f"DRAM counters are read on the controller, not on SSH host {point.host}"
    return client_cpus


def _start_server(out: ServingOutcome, server: Server, server_cpus: list[int]) -> None:
    """Start the server, wait until ready and check its threads stay in the placement."""
    server.start()
    out.extra["ready_s"] = server.wait_ready()
    affinity = server.affinity()
    out.extra["server_affinity"] = dict(Counter(affinity.values()))
    stray = {k: v for k, v in affinity.items() if not set(parse_cpulist(v)) <= set(server_cpus)}
    if stray:
        out.fail(f"server threads outside the placement: {sorted(set(stray.values()))}")


def _spawn_sampler(ex: Any, server: Server, cfg: ServingConfig, place: dict, remote: str) -> int:
    """The server-side sampler, beside the server, on the CPUs the server does not use there."""
    return ex.spawn(
        [
            ex.python,
            f"{ex.tools}/procstats.py",
            "--root-pid",
            str(server.pid),
            "--out",
            f"{remote}/procstats.jsonl",
            "--interval-ms",
            str(cfg.sample_interval_ms),
        ],
        cpus=parse_cpulist(place["client_cpus"]),
        log=f"{remote}/procstats.log",
    )


def _run_levels(
    out: ServingOutcome,
    server: Server,
    cfg: ServingConfig,
    point: Any,
    base_url: str,
    client_cpus: list[int],
    raw_dir: Path,
    deadline: float,
    windows: list[tuple[LevelResult, float, float]],
) -> None:
    """Every load level in turn, each within what is left of the run's time; ``windows``
    gets each level's wall-clock window."""
    for level in cfg.levels:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerFailure(f"run timed out before level {level.label} ({point.timeout_s:g} s)")
        w0 = time.time()
        lr = run_level(
            cfg,
            level,
            base_url,
            client_cpus,
            raw_dir / level.label,
            seed=int(point.extra.get("seed", 0)),
            rep=point.repetition,
            timeout_s=left,
        )
        windows.append((lr, w0, time.time()))
        out.levels.append(lr)
        server.check_alive()  # also remembers the tree's PIDs for stop()
        s = lr.summary
        why = health(level, s, cfg.output_tokens)
        if why:
            out.invalid(why)
        if s["failed"]:
            top = Counter(e for e in s["errors"] if e).most_common(1)[0]
            out.fail(
                f"{lr.level.label}: {s['failed']} of {s['num_prompts']} requests failed "
                f"({top[0]} x{top[1]})"
            )


def _stop_sampler(ex: Any, sampler: int | None, remote: str, raw_dir: Path) -> None:
    """Stop the sampler and fetch its samples, if it was started."""
    if sampler is not None:  # SIGTERM makes it write its summary
        with contextlib.suppress(Exception):  # a lost host: its samples are lost with it
            ex.stop_spawned(sampler, 10.0)
            ex.get(f"{remote}/procstats.jsonl", raw_dir / "procstats.jsonl")


def run(context: RunContext, point: Any) -> ServingOutcome:
    """Run one serving point (``RunPoint`` of kind "serving"); never raises for server faults.

    The server and its sampler run on the point's host, listening on its address; readiness
    and the load generator run here, pinned to this machine's CPUs (on another host than this
    one recorded as ``client_on: controller``).
    """
    ex, raw_dir, remote = context.ex, context.raw, context.remote
    cfg = ServingConfig.from_json(point.extra["serving"])
    arm = cfg.arm(point.extra["arm"])
    place = point.extra["placement"]
    server_cpus = parse_cpulist(place["server_cpus"])
    client_cpus = parse_cpulist(place["client_cpus"])
    port = free_port(ex)
    argv = [_fill(a, port, ex.address) for a in point.argv]
    base_url = _fill(cfg.base_url, port, ex.address)
    ready_url = base_url + (arm.ready_path or cfg.ready_path)
    out = ServingOutcome(
        extra={
            "arm": arm.name,
            "baseline": cfg.baseline,
            "port": port,
            "argv": argv,
            "ready_url": ready_url,
            **place,
        }
    )
    server = Server(
        ex,
        argv,
        ready_url,
        f"{remote}/server.log",
        cpus=server_cpus,
        env=dict(point.env),
        log_path=raw_dir / "server.log",
        ready_timeout_s=cfg.ready_timeout_s,
    )
    dram = DramCounter(raw_dir / "dram-perf.csv")
    if not ex.controller:
        client_cpus = _client_on_controller(out, dram, point, place, client_cpus)
    sampler: int | None = None
    windows: list[tuple[LevelResult, float, float]] = []
    out.started = time.time()
    deadline = time.monotonic() + point.timeout_s
    try:
        _start_server(out, server, server_cpus)
        sampler = _spawn_sampler(ex, server, cfg, place, remote)
        dram.start()
        _run_levels(out, server, cfg, point, base_url, client_cpus, raw_dir, deadline, windows)
    except ServerFailure as exc:
        out.fail(str(exc))
    except PromptError as exc:
        out.fail(f"prompts: {exc}")
    finally:
        counts = dram.stop()
        _stop_sampler(ex, sampler, remote, raw_dir)
        left_over = server.stop()
        out.exit_code = server.exit_code
        if left_over:
            out.fail(f"server PIDs still running after stop: {left_over}")
    out.duration_s = time.time() - out.started
    out.extra["server_exit_code"] = server.exit_code
    out.extra["server_pids"] = sorted(server.pids_seen)  # every PID of the tree; all stopped
    out.extra["server_pids_left"] = left_over
    out.extra["server_peak_rss_kib"] = server.peak_rss_kib
    _collect_metrics(out, raw_dir, windows, counts, dram.reason)
    out.requests = [(lr.level.label, lr.records) for lr in out.levels]
    (raw_dir / "serving.json").write_text(
        json.dumps(
            {"status": out.status, "reason": out.reason, "extra": out.extra}, indent=1, default=str
        )
    )
    out.provenance = {"serving": out.extra}
    return out


def _collect_metrics(out: ServingOutcome, raw_dir: Path, windows, counts, dram_reason) -> None:
    samples_path = raw_dir / "procstats.jsonl"
    samples = (
        [json.loads(x) for x in samples_path.read_text().splitlines() if x.strip()]
        if samples_path.exists()
        else []
    )
    summary = procstats.read_summary(samples_path)
    total_out = 0
    for lr, w0, w1 in windows:
        dims = lr.level.dims()
        for name, value, unit in metrics_mod.scalar_metrics(lr.summary):
            out.metrics.append(Metric(name, value, unit, dims, PARSER))
        peak = _peak_in(samples, w0, w1)
        if peak is not None:
            lr.summary["peak_pss_bytes"] = peak
            out.metrics.append(Metric("peak_pss_bytes", float(peak), "B", dims, PARSER))
        total_out += lr.summary["total_output_tokens"]
    if summary:
        out.metrics.append(
            Metric("peak_pss_bytes", float(summary["peak_pss_bytes"]), "B", {"load": "all"}, PARSER)
        )
        for group, secs in summary["cpu_s_by_group"].items():
            out.metrics.append(
                Metric(
                    "server_cpu_s", float(secs), "s", {"load": "all", "thread_group": group}, PARSER
                )
            )
        out.extra["threads_by_group"] = summary["threads_by_group"]
    elif samples and "unsupported" in samples[0]:
        out.extra["procstats"] = samples[0]["unsupported"]
    if counts and total_out:
        out.metrics.append(
            Metric(
                "dram_bytes_per_output_token",
                (counts["read_bytes"] + counts["write_bytes"]) / total_out,
                "B",
                {"load": "all"},
                PARSER,
            )
        )
    else:
        out.extra["dram_bytes_per_output_token"] = dram_reason or "no output tokens"
