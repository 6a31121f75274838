"""The stage planner's constants: from a constants file, or from a host's measured runs in the
store, each value with its provenance (docs/planner.md).

A constants file is YAML, `version: 1`, `host`, `kernel`, and one entry per constant:
`{value: N, source: TEXT}`. The seed's published constants ship as
experiments/models/constants/seed-oct-2026.yaml.

From the store (`constants_from_store`), per host, over every campaign in the results folder,
runs stored ok:

| constant | runs (binary) | metric |
|---|---|---|
| gemv_gbps_per_core | `layer --slice` (one worker's share, no exchanges) | sum of phase_weight_bytes / sum of phase_gemv over the GEMV phases |
| exchange_us | `exchange` over >= 2 participants at the 2,560 B vector | latency_p50 (mode given, or the fastest) |
| act_gbps | `exchange` at a larger vector, same mode and participants | (bytes - 2,560) / (latency_p50 difference) |
| kv_gbps | `kvstream` (else a `ladder` run of experiment `kv-read`) | kv_bw / bw_total (the largest context measured) |

A host with none of them is one line naming the experiment to run.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from socketlab import paths
from socketlab.errors import SpecError, StoreError
from socketlab.plan.stage import Constants

CONSTANTS_DIR = paths.EXPERIMENTS / "models" / "constants"
SEED = CONSTANTS_DIR / "seed-oct-2026.yaml"
NUMERIC = ("gemv_gbps_per_core", "exchange_us", "kv_gbps", "act_gbps", "hop_us", "allreduce_us",
           "gemv_l3_gbps_per_core")
REQUIRED = NUMERIC[:4]
BASE_BYTES = 2560
#: what to run when the store has nothing for a constant
EXPERIMENT = {
    "gemv_gbps_per_core": "layer --slice (bench/stage_plan_host.py, or a spec running it)",
    "exchange_us": "exchange --bytes 2560 over >= 2 cores (campaign-oct.yaml: exchange)",
    "act_gbps": "exchange at a larger --bytes, same mode and cores (bench/stage_plan_host.py)",
    "kv_gbps": "kvstream (campaign-oct.yaml: kvstream)",
}


def load_constants(path: str | Path) -> Constants:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{path}: no such constants file; expected a YAML file like {SEED}")
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"{p}: can't read as YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise SpecError(f"{p}: version: expected 1")
    values: dict[str, float] = {}
    prov: dict[str, str] = {}
    for key in NUMERIC:
        entry = doc.get(key)
        if entry is None:
            if key in REQUIRED:
                raise SpecError(f"{p}: {key}: missing; expected {{value: N, source: TEXT}}")
            continue
        v = entry.get("value") if isinstance(entry, dict) else entry
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise SpecError(f"{p}: {key}.value: expected a positive number, got {v!r}")
        values[key] = float(v)
        prov[key] = str(entry.get("source", p)) if isinstance(entry, dict) else str(p)
    unknown = set(doc) - set(NUMERIC) - {"version", "host", "kernel", "note"}
    if unknown:
        raise SpecError(f"{p}: {sorted(unknown)[0]}: unknown field; expected one of "
                        f"{', '.join(NUMERIC)}, host, kernel, note")
    return Constants(**values, host=str(doc.get("host", "")), kernel=str(doc.get("kernel", "")),
                     provenance=prov)


@dataclass(frozen=True)
class Measured:
    value: float
    run_keys: tuple[str, ...]
    detail: str


def _runs(results: Path, host: str) -> list[dict[str, Any]]:
    """Every ok run of `host` with its metrics, over all campaigns' stores."""
    out: list[dict[str, Any]] = []
    for db in sorted(results.glob("*/store.sqlite")):
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            con.row_factory = sqlite3.Row
            runs = con.execute("SELECT run_key, experiment, params, argv FROM runs "
                               "WHERE host = ? AND status = 'ok'", (host,)).fetchall()
            for r in runs:
                ms = con.execute("SELECT name, value, dims FROM metrics WHERE run_key = ?",
                                 (r["run_key"],)).fetchall()
                out.append({"key": r["run_key"], "experiment": r["experiment"],
                            "params": json.loads(r["params"]), "argv": json.loads(r["argv"]),
                            "metrics": [(m["name"], m["value"], json.loads(m["dims"]))
                                        for m in ms]})
            con.close()
        except sqlite3.Error as exc:
            raise StoreError(f"{db}: can't read the store ({exc})") from None
    return out


def _binary(run: dict) -> str:
    return Path(run["argv"][0]).name if run["argv"] else ""


def _arg(run: dict, flag: str) -> str | None:
    argv = run["argv"]
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def measured_constants(host: str, *, results: Path | None = None, kernel: str = "avx2",
                       mode: str | None = None,
                       bytes_per_core: int | None = None,
                       batch: int | None = None) -> dict[str, Measured]:
    """What the store holds for `host`, constant by constant (missing ones absent). The GEMV
    rate depends on the tier a slice lives in: with `bytes_per_core` the slice run nearest that
    size gives it, else the median over all slice runs."""
    runs = _runs(Path(results or paths.RESULTS), host)
    found: dict[str, Measured] = {}
    gemv = [r for r in runs if _binary(r) == "layer" and _arg(r, "--slice")
            and (_arg(r, "--gemv") or "avx2") == kernel
            and (batch is None or int(_arg(r, "--batch") or 1) == batch)]
    if gemv:
        rates = []
        for r in gemv:
            # the weight phases only: attention's q.K and P.V are the KV term's
            us = sum(v for n, v, d in r["metrics"]
                     if n == "phase_gemv" and d.get("phase") not in ("attention", "combine"))
            nb = sum(v for n, v, d in r["metrics"] if n == "phase_weight_bytes")
            if us > 0:
                rates.append((nb / (us * 1e3), r["key"], nb))
        if rates and bytes_per_core:
            near = min(abs(nb - bytes_per_core) for _, _, nb in rates)
            rates = [r for r in rates if abs(r[2] - bytes_per_core) == near]
        if rates:
            rates.sort()
            mid = rates[len(rates) // 2]
            found["gemv_gbps_per_core"] = Measured(
                mid[0], tuple(k for _, k, _ in rates),
                f"layer --slice --gemv {kernel}: median of {len(rates)} runs, "
                f"{int(mid[2]):,} B per worker")
    xch: dict[tuple[str, int, int], list[tuple[float, str]]] = {}
    for r in runs:
        if _binary(r) != "exchange":
            continue
        for n, v, d in r["metrics"]:
            if n == "latency_p50" and d.get("participants", 0) >= 2 and d.get("mode") != "pingpong":
                xch.setdefault((d["mode"], d["participants"], int(d["bytes"])), []).append(
                    (v, r["key"]))
    base = {k: v for k, v in xch.items() if k[2] == BASE_BYTES and (mode is None or k[0] == mode)}
    if base:
        (m, parts, _), vals = min(base.items(), key=lambda kv: _median(kv[1]))
        found["exchange_us"] = Measured(_median(vals), tuple(k for _, k in vals),
                                        f"exchange --mode {m}, {parts} participants, 2,560 B")
        big = {k: v for k, v in xch.items() if k[:2] == (m, parts) and k[2] > BASE_BYTES}
        if big:
            (_, _, nb), bvals = max(big.items(), key=lambda kv: kv[0][2])
            dt = _median(bvals) - _median(vals)
            if dt > 0:
                found["act_gbps"] = Measured(
                    (nb - BASE_BYTES) / (dt * 1e3), tuple(k for _, k in vals + bvals),
                    f"exchange --mode {m}, {parts} participants, {nb:,} B vs 2,560 B")
    kv = [(r, v) for r in runs if _binary(r) == "kvstream"
          for n, v, d in r["metrics"] if n == "kv_bw"]
    source = "kvstream"
    if not kv:  # AVX2-only hosts: the ladder's read of the KV bytes (no attention arithmetic)
        kv = [(r, v) for r in runs if _binary(r) == "ladder" and r["experiment"] == "kv-read"
              for n, v, d in r["metrics"] if n == "bw_total"]
        for r, _ in kv:
            r["argv"] = [*r["argv"], "--tokens", str(r["params"].get("context", 0))]
        source = "ladder --kernel avx2-read of the KV bytes (experiment kv-read)"
    if kv:
        most = max(int(_arg(r, "--tokens") or 0) for r, _ in kv)
        vals = [(v, r["key"]) for r, v in kv if int(_arg(r, "--tokens") or 0) == most]
        found["kv_gbps"] = Measured(_median(vals), tuple(dict.fromkeys(k for _, k in vals)),
                                    f"{source}, {most} tokens: median of {len(vals)} values")
    return found


def constants_from_store(host: str, *, results: Path | None = None, kernel: str = "avx2",
                         hop_us: float = 5.0, allreduce_us: float = 10.0,
                         batch: int | None = None) -> Constants:
    """The host's constants; the GEMV rate from slice runs at `batch` where there are any."""
    found = measured_constants(host, results=results, kernel=kernel)
    at_b = measured_constants(host, results=results, kernel=kernel, batch=batch) if batch else {}
    if "gemv_gbps_per_core" in at_b:
        found["gemv_gbps_per_core"] = at_b["gemv_gbps_per_core"]
    missing = [k for k in REQUIRED if k not in found]
    if missing:
        where = Path(results or paths.RESULTS)
        raise StoreError(
            f"host {host}: no measured {missing[0]} in {where}/*/store.sqlite; run "
            f"{EXPERIMENT[missing[0]]} on it first (or pass --constants FILE)")
    prov = {k: f"{m.detail}; runs {', '.join(x[:12] for x in m.run_keys)}"
            for k, m in found.items()}
    prov["hop_us"] = prov["allreduce_us"] = "assumed (flag): no multi-socket link measured"
    return Constants(
        gemv_gbps_per_core=found["gemv_gbps_per_core"].value,
        exchange_us=found["exchange_us"].value,
        kv_gbps=found["kv_gbps"].value,
        act_gbps=found["act_gbps"].value,
        hop_us=hop_us, allreduce_us=allreduce_us, host=host, kernel=kernel, provenance=prov)


def _median(vals: list[tuple[float, str]]) -> float:
    xs = sorted(v for v, _ in vals)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
