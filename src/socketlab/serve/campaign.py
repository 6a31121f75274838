"""One serving run end to end, and a small loop that stores a plan's serving runs.

``run_point(point, raw_dir)``: pick a free port, start the arm's server pinned to the point's
CPUs in its own process group, wait for readiness, start the server-side samplers, then per
load level make prompts, run the load generator as a separate process pinned to the client
CPUs, compute the metrics and check the server is still alive; finally always stop the samplers
and the whole server tree by PID. The outcome carries a status ("ok" or "failed"), a one-line
reason, metrics (``socketlab.parse.Metric`` with a ``load`` dimension) and the raw records.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from socketlab.cpulist import format_cpulist, parse_cpulist
from socketlab.parse import Metric
from socketlab.serve import metrics as metrics_mod
from socketlab.serve import procstats
from socketlab.serve.config import Level, ServingConfig
from socketlab.serve.dram import DramCounter
from socketlab.serve.loadgen import LoadConfig, LoadResult, Prompt, read_result
from socketlab.serve.prompts import PromptError, ServerTokenizer, corpus_prompts, synthetic_prompts
from socketlab.serve.records import RequestRecord
from socketlab.serve.server import ServerFailure, ServerProcess, pinned

PARSER = "serving/1"


@dataclass
class LevelResult:
    level: Level
    summary: dict[str, Any]
    records: list[RequestRecord]
    meta: dict[str, Any]


@dataclass
class ServingOutcome:
    status: str = "ok"
    reason: str = ""
    metrics: list[Metric] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    server_pids: list[int] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.status = "failed"
        self.reason = f"{self.reason}; {reason}" if self.reason else reason

    def invalid(self, reason: str) -> None:
        """The run finished but its numbers can't be trusted (a failure stays a failure)."""
        if self.status == "ok":
            self.status = "invalid"
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
            return (f"{level.label}: the load generator fell behind (dispatch delay p99 "
                    f"{delay:.2f} ms > {limit:.2f} ms)")
    short = sum(1 for n, e in zip(summary["output_lens"], summary["errors"], strict=True)
                if not e and n < 0.9 * output_tokens)
    if short:
        return (f"{level.label}: {short} of {summary['completed']} outputs are shorter than 90% "
                f"of output_tokens {output_tokens} (set request.ignore_eos or suppress_token_ids)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_prompts(cfg: ServingConfig, level: Level, base_url: str, seed: int,
                 rep: int) -> tuple[list[Prompt], list[Prompt]]:
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
    return (corpus_prompts(cfg.warmup_requests, cfg.input_tokens, seed, f"w-{tag}"),
            corpus_prompts(cfg.requests, cfg.input_tokens, seed, f"m-{tag}"))


def run_level(cfg: ServingConfig, level: Level, base_url: str, client_cpus: list[int],
              out: Path, seed: int, rep: int, timeout_s: float) -> LevelResult:
    """One load level through ``python -m socketlab.serve.loadgen`` pinned to the client CPUs."""
    out.mkdir(parents=True, exist_ok=True)
    warm, meas = make_prompts(cfg, level, base_url, seed, rep)
    load = LoadConfig(base_url=base_url, endpoint=cfg.endpoint, model=cfg.model,
                      concurrency=level.concurrency, rate=level.rate, burstiness=cfg.burstiness,
                      max_concurrency=cfg.max_concurrency, seed=seed,
                      max_tokens=cfg.output_tokens, body=cfg.request,
                      timeout_s=cfg.request_timeout_s)
    doc = {"load": vars(load), "warmup": [vars(p) for p in warm],
           "measured": [vars(p) for p in meas]}
    (out / "loadgen-config.json").write_text(json.dumps(doc, indent=1))
    with open(out / "loadgen.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "socketlab.serve.loadgen",
                                 str(out / "loadgen-config.json"), str(out)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=pinned(client_cpus))
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it may have ended just now
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise ServerFailure(f"load level {level.label} ran past {timeout_s:g} s") from None
    if rc != 0:
        tail = (out / "loadgen.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise ServerFailure(f"load generator failed at {level.label} with exit code {rc}: "
                            f"{tail[0][:160] if tail else 'no output'}")
    res: LoadResult = read_result(out)
    summary = metrics_mod.compute(res.records, cfg.slo, res.window)
    # vLLM's header fields with vLLM's meanings, so summary.json reads as a `vllm bench serve`
    # result (layout serve-start-times) and `orchestrate import-vllm` takes it back
    summary.update(date=time.strftime("%Y%m%d-%H%M%S"),
                   backend="openai-chat" if cfg.endpoint.endswith("chat/completions")
                   else "openai", model_id=cfg.model,
                   request_rate=level.rate or "inf", burstiness=cfg.burstiness,
                   max_concurrency=level.concurrency or cfg.max_concurrency,
                   generator="socketlab.serve.loadgen")
    summary.update(load=level.label, client_cpus=res.meta["client_cpus"],
                   client_cpu_s=res.meta["client_cpu_s"],
                   event_loop_lag_p99_ms=res.meta["event_loop_lag_p99_ms"],
                   short_outputs=res.meta["short_outputs"])
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return LevelResult(level, summary, res.records, res.meta)


def _peak_in(samples: list[dict], t0: float, t1: float) -> int | None:
    vals = [s["pss_bytes"] for s in samples if "pss_bytes" in s and t0 <= s["t"] <= t1]
    return max(vals) if vals else None


def remote_free_port(ex: Any, address: str) -> int:
    """A free TCP port on an SSH host's ``address``, asked of the host itself."""
    code = ("import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); "
            "print(s.getsockname()[1])")
    text = ex.check([ex.python, "-c", code, address], timeout=30, what="picking a free port")
    return int(text.strip().splitlines()[-1])


def controller_cpus(wanted: list[int]) -> list[int]:
    """CPUs here for a load generator whose host-side list is ``wanted``: those of them this
    process may use, else all it may use (the controller's CPUs are not the host's)."""
    allowed = sorted(os.sched_getaffinity(0))
    return [c for c in wanted if c in allowed] or allowed


def run_point(point: Any, raw_dir: Path, *, run_key: str = "",
              store_path: Path | None = None, ex: Any = None,
              address: str = "127.0.0.1") -> ServingOutcome:
    """Run one serving point (``RunPoint`` of kind "serving"); never raises for server faults.

    With ``ex`` (an SSH host's executor) the server and its sampler run on that host through
    its agent, listening on ``address``; readiness and the load generator run here, pinned to
    this machine's CPUs (recorded as ``client_on: controller``).
    """
    raw_dir.mkdir(parents=True, exist_ok=True)
    cfg = ServingConfig.from_json(point.extra["serving"])
    arm = cfg.arm(point.extra["arm"])
    place = point.extra["placement"]
    server_cpus = parse_cpulist(place["server_cpus"])
    client_cpus = parse_cpulist(place["client_cpus"])
    port = free_port() if ex is None else remote_free_port(ex, address)

    def fill(text: str) -> str:
        return text.replace("{port}", str(port)).replace("{address}", address)

    argv = [fill(a) for a in point.argv]
    base_url = fill(cfg.base_url)
    ready_url = base_url + (arm.ready_path or cfg.ready_path)
    out = ServingOutcome(extra={"arm": arm.name, "baseline": cfg.baseline, "port": port,
                                "argv": argv, "ready_url": ready_url, **place})
    remote = None if ex is None else f"{ex.workdir}/runs/{run_key or 'serving'}"
    if ex is None:
        server = ServerProcess(argv, ready_url, cpus=server_cpus, env=dict(point.env),
                               log_path=raw_dir / "server.log",
                               ready_timeout_s=cfg.ready_timeout_s)
    else:
        from socketlab.serve.server import RemoteServer

        ex.check(["mkdir", "-p", remote], what="making the run directory")
        server = RemoteServer(ex, argv, ready_url, f"{remote}/server.log", cpus=server_cpus,
                              env=dict(point.env), log_path=raw_dir / "server.log",
                              ready_timeout_s=cfg.ready_timeout_s)
        # the load generator runs here, not on the host: its CPUs are this machine's
        out.extra.update(client_on="controller", server_host=point.host,
                         host_client_cpus=place["client_cpus"])
        client_cpus = controller_cpus(client_cpus)
        out.extra["client_cpus"] = format_cpulist(client_cpus)
    sampler: subprocess.Popen | int | None = None
    dram = DramCounter(raw_dir / "dram-perf.csv")
    if ex is not None:  # perf here would count this machine's memory traffic, not the host's
        dram.reason = f"DRAM counters are read on the controller, not on SSH host {point.host}"
    windows: list[tuple[LevelResult, float, float]] = []
    deadline = time.monotonic() + point.timeout_s
    try:
        server.start()
        out.extra["ready_s"] = server.wait_ready()
        affinity = server.affinity()
        out.extra["server_affinity"] = dict(Counter(affinity.values()))
        stray = {k: v for k, v in affinity.items() if not set(parse_cpulist(v)) <= set(server_cpus)}
        if stray:
            out.fail(f"server threads outside the placement: {sorted(set(stray.values()))}")
        if ex is None:
            sampler = subprocess.Popen(
                [sys.executable, procstats.__file__, "--root-pid", str(server.pid),
                 "--out", str(raw_dir / "procstats.jsonl"),
                 "--interval-ms", str(cfg.sample_interval_ms)],
                start_new_session=True, preexec_fn=pinned(client_cpus))
            dram.start()
        else:  # on the host, beside the server, on the CPUs the server does not use there
            sampler = ex.spawn(
                [ex.python, f"{ex.tools}/procstats.py", "--root-pid", str(server.pid),
                 "--out", f"{remote}/procstats.jsonl",
                 "--interval-ms", str(cfg.sample_interval_ms)],
                cpus=parse_cpulist(place["client_cpus"]), log=f"{remote}/procstats.log")
        for level in cfg.levels:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerFailure(f"run timed out before level {level.label} "
                                    f"({point.timeout_s:g} s)")
            w0 = time.time()
            lr = run_level(cfg, level, base_url, client_cpus, raw_dir / level.label,
                           seed=int(point.extra.get("seed", 0)), rep=point.repetition,
                           timeout_s=left)
            windows.append((lr, w0, time.time()))
            out.levels.append(lr)
            server.check_alive()  # also remembers the tree's PIDs for stop()
            s = lr.summary
            why = health(level, s, cfg.output_tokens)
            if why:
                out.invalid(why)
            if s["failed"]:
                top = Counter(e for e in s["errors"] if e).most_common(1)[0]
                out.fail(f"{lr.level.label}: {s['failed']} of {s['num_prompts']} requests failed "
                         f"({top[0]} x{top[1]})")
    except ServerFailure as exc:
        out.fail(str(exc))
    except PromptError as exc:
        out.fail(f"prompts: {exc}")
    finally:
        counts = dram.stop() if ex is None else None
        if isinstance(sampler, int):  # on the host: SIGTERM makes it write its summary
            with contextlib.suppress(Exception):  # a lost host: its samples are lost with it
                ex.stop_spawned(sampler, 10.0)
                ex.get(f"{remote}/procstats.jsonl", raw_dir / "procstats.jsonl")
        elif sampler is not None:
            with contextlib.suppress(ProcessLookupError):
                sampler.send_signal(signal.SIGTERM)
            try:
                sampler.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sampler.kill()
                sampler.wait()
        out.server_pids = sorted(server.pids_seen)
        left_over = server.stop()
        out.exit_code = server.exit_code
        if left_over:
            out.fail(f"server PIDs still running after stop: {left_over}")
        if remote is not None:
            ex.call(["rm", "-rf", remote])
    out.extra["server_exit_code"] = server.exit_code
    out.extra["server_pids"] = out.server_pids  # every PID of the tree; all checked stopped
    out.extra["server_pids_left"] = left_over
    _collect_metrics(out, raw_dir, windows, counts, dram.reason)
    if store_path is not None and run_key:
        from socketlab.serve.requests_store import save_requests

        for lr in out.levels:
            save_requests(store_path, run_key, lr.level.label, lr.records)
    (raw_dir / "serving.json").write_text(json.dumps(
        {"status": out.status, "reason": out.reason, "extra": out.extra}, indent=1, default=str))
    return out


def _collect_metrics(out: ServingOutcome, raw_dir: Path, windows, counts, dram_reason) -> None:
    samples_path = raw_dir / "procstats.jsonl"
    samples = ([json.loads(x) for x in samples_path.read_text().splitlines() if x.strip()]
               if samples_path.exists() else [])
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
        out.metrics.append(Metric("peak_pss_bytes", float(summary["peak_pss_bytes"]), "B",
                                  {"load": "all"}, PARSER))
        for group, secs in summary["cpu_s_by_group"].items():
            out.metrics.append(Metric("server_cpu_s", float(secs), "s",
                                      {"load": "all", "thread_group": group}, PARSER))
        out.extra["threads_by_group"] = summary["threads_by_group"]
    elif samples and "unsupported" in samples[0]:
        out.extra["procstats"] = samples[0]["unsupported"]
    if counts and total_out:
        out.metrics.append(Metric("dram_bytes_per_output_token",
                                  (counts["read_bytes"] + counts["write_bytes"]) / total_out,
                                  "B", {"load": "all"}, PARSER))
    else:
        out.extra["dram_bytes_per_output_token"] = dram_reason or "no output tokens"


def run_plan(plan: Any, store: Any, results: Path) -> list[Any]:
    """Run and store every serving point of a plan on this machine (resume: complete run keys
    are skipped; warm-up repetitions run but are never stored). Returns the stored records.

    The orchestrator's runner can call ``run_point`` itself; this loop is what `orchestrate`
    falls back to and what the tests drive.
    """
    from socketlab.store import RunRecord

    stored = []
    for point in plan.points:
        if point.kind != "serving":
            continue
        profile = plan.profile_hash(point.host)
        key = point.key(None, profile)
        if not point.warmup and store.has_complete(key):
            continue
        raw = Path(results) / point.campaign / "runs" / key
        started = time.time()
        outcome = run_point(point, raw, run_key=key,
                            store_path=None if point.warmup else Path(store.path))
        if point.warmup:
            continue
        finished = time.time()
        record = RunRecord(
            run_key=key, campaign=point.campaign, experiment=point.experiment, host=point.host,
            repetition=point.repetition, params=dict(point.params), status=outcome.status,
            reason=outcome.reason, exit_code=outcome.exit_code, started=started,
            finished=finished, duration_s=finished - started, argv=list(point.argv),
            cpus=point.cpus, host_profile=profile, spec_sha256=plan.spec.sha256,
            raw_dir=str(raw), extra=outcome.extra)
        store.add_run(record, outcome.metrics)
        stored.append(record)
    return stored


def run_in_runner(runner: Any, ex: Any, point: Any, key: str) -> None:
    """The orchestrator's hook for a serving point (socketlab.runner.Runner._run_point).

    On a local host everything runs here. On an SSH host the server and its sampler run there
    through the host's agent (listening on its inventory address) and the load generator here.
    """
    from socketlab.runner import point_label

    host = runner.hosts.get(point.host)
    remote = getattr(host, "connection", "local") != "local"
    where = {"ex": ex, "address": host.address} if remote else {}

    label = point_label(point)
    runner.reporter.point_started(point.host, label)
    t0 = time.monotonic()
    raw = runner.results_dir / "runs" / key
    if raw.exists() and not point.warmup:
        shutil.rmtree(raw)  # an earlier failed attempt's files
    before = runner._fingerprint(ex)
    started = time.time()
    outcome = run_point(point, raw if not point.warmup else runner.results_dir / ".warmup" / key,
                        run_key=key, store_path=None if point.warmup else Path(runner.store.path),
                        **where)
    after = runner._fingerprint(ex)
    if point.warmup:
        shutil.rmtree(runner.results_dir / ".warmup" / key, ignore_errors=True)
        runner.reporter.point_done(point.host, label, "warmup", "", time.monotonic() - t0)
        return
    record = runner._record(point, key, outcome.status, outcome.reason,
                            exit_code=outcome.exit_code, started=started,
                            duration_s=time.time() - started, fingerprint_before=before,
                            fingerprint_after=after, extra=outcome.extra)
    runner.store.add_run(record, outcome.metrics)
    runner._done(point, record, time.monotonic() - t0)
