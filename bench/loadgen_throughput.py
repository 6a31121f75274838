"""How many streamed tokens per second one client core sustains, and the timestamp error.

The scripted endpoint (socketlab.serve.scripted_server) streams tokens as fast as it can (or paced,
``--every-ms``) from its own CPU; the load generator runs pinned to one other CPU. Per level:
tokens/s the client received, the client's CPU use (near 1.0 core = the client is the limit),
and the timestamp error = client receive time - the server's write time of the same token
(both CLOCK_MONOTONIC), as p50/p99/max. Prints a markdown table and writes JSON lines.

    .venv/bin/python bench/loadgen_throughput.py --client-cpu 0 --server-cpu 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from socketlab.serve import metrics, scripted_server
from socketlab.serve.loadgen import LoadConfig, Prompt, run_load


def start_endpoint(
    cpu: int, tmp: Path, every_ms: float, batch: int
) -> tuple[subprocess.Popen, str]:
    return scripted_server.launch(
        ["--every-ms", str(every_ms), "--batch", str(batch if every_ms == 0 else 1)],
        tmp / f"port-{every_ms}",
        preexec_fn=lambda: os.sched_setaffinity(0, [cpu]),
    )


def one(url: str, cpu: int, conc: int, tokens: int, requests: int) -> dict:
    cfg = LoadConfig(base_url=url, concurrency=conc, max_tokens=tokens, cpus=[cpu])
    warm = [Prompt(f"w{i}", f"[w{i}] x") for i in range(conc)]
    meas = [Prompt(f"m{i}", f"[m{i}] x") for i in range(requests)]
    res = run_load(cfg, warm, meas)
    s = metrics.compute(res.records, None, res.window)
    t0 = res.meta["t0_ns"]
    err = np.array(
        [
            (t + t0 - st) / 1e6
            for r in res.records
            if r.phase == "measured"
            for (t, _), st in zip(r.events, r.server_ts_ns or [], strict=False)
        ]
    )
    return {
        "concurrency": conc,
        "tokens_per_request": tokens,
        "requests": requests,
        "completed": s["completed"],
        "tok_s": s["output_throughput"],
        "window_tok_s": s["window_output_tok_s"],
        "client_cpu_per_s": res.meta["client_cpu_per_s"],
        "ts_err_p50_ms": float(np.percentile(err, 50)),
        "ts_err_p99_ms": float(np.percentile(err, 99)),
        "ts_err_max_ms": float(err.max()),
        "loop_lag_p99_ms": res.meta["event_loop_lag_p99_ms"],
        # CPU the client spent per received token: the capacity of one whole core is its
        # inverse, a figure that holds even when other work shares the core
        "client_us_per_token": res.meta["client_cpu_per_s"] / s["output_throughput"] * 1e6,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=0, help="per level (default 4 x conc, >= 16)")
    ap.add_argument("--every-ms", default="0,1", help="server pacing per stream, comma list")
    ap.add_argument(
        "--batch",
        type=int,
        default=16,
        help="unpaced endpoint: token events per socket write, so the endpoint outruns the client",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    load0 = f"{os.getloadavg()[0]:.2f}"
    with tempfile.TemporaryDirectory() as tmp:
        for every in [float(x) for x in args.every_ms.split(",")]:
            proc, url = start_endpoint(args.server_cpu, Path(tmp), every, args.batch)
            try:
                for conc in [int(c) for c in args.concurrency.split(",")]:
                    n = args.requests or max(16, 4 * conc)
                    row = one(url, args.client_cpu, conc, args.tokens, n) | {"every_ms": every}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"load average before: {load0}, after: {os.getloadavg()[0]:.2f}")
    print(
        "| server pacing | concurrency | tokens/s received | client CPU (cores) | "
        "client µs/token (1 core =) | ts error p50 / p99 / max ms | loop lag p99 ms |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        pace = "unpaced" if r["every_ms"] == 0 else f"1 token / {r['every_ms']:g} ms per stream"
        per = r["client_us_per_token"]
        print(
            f"| {pace} | {r['concurrency']} | {r['tok_s']:,.0f} | {r['client_cpu_per_s']:.2f} | "
            f"{per:.1f} ({1e6 / per:,.0f} tok/s) | "
            f"{r['ts_err_p50_ms']:.3f} / {r['ts_err_p99_ms']:.3f} / {r['ts_err_max_ms']:.2f} | "
            f"{r['loop_lag_p99_ms']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
