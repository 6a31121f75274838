"""The stage planner's constants: from a constants file, or from a host's measured runs in the
store, each value with its provenance (docs/planner.md).

A constants file is YAML, `version: 1`, `host`, `kernel`, and one entry per constant:
`{value: N, source: TEXT}`. The seed's published constants ship as
experiments/models/constants/seed-oct-2026.yaml.

From the store (`constants_from_store`), per host, over every campaign in the results folder,
runs stored ok:

| constant | runs (binary) | metric |
|---|---|---|
| gemv_gbps_per_core | `layer --slice` (the workers' shares, no barriers) | sum of phase_weight_bytes / sum of the weight phases' phase_gemv_p50 (the kernel alone); without elem_ns: / (step_p50 - attention's phase_gemv_p50) |
| elem_ns, gelu_ns | `layer --slice` of other shapes than the one predicted | (phase_compute - phase_gemv) of qkv, attention, combine per vector element; of gateup and ple_gate, less their norms, per gelu'd element |
| exchange_us | `exchange` over >= 2 participants at the 2,560 B vector | latency_p50 (mode given, or the fastest) |
| act_gbps | `exchange` at a larger vector, same mode and participants | (bytes - 2,560) / (latency_p50 difference) |
| kv_gbps | `layer --slice --ctx N` at two contexts (experiment kv-attn: the stage's own attention), else `kvstream`, else a `ladder` run of experiment `kv-read` | KV bytes / attention p50, both as differences; kv_bw; bw_total (the largest context measured) |
| kv_classes | the same kv-attn runs, per attention class: (head_dim, GQA group) from the run's params or its dump's shape file, per batch, per context | KV bytes per step / attention p50 (median repetition): one `KvRate` each, warm, or cold where the run rotates KV copies (`--kv-cold-mib`: `footprint` = the copies' bytes); a stage's attention takes its class's cold points where its weights overflow the L2 (`stage.kv_evicted`), else the warm ones, at the context nearest its KV bytes (`Constants.kv_rate`) |

Links (hop and all-reduce as bytes, `Constants.link`): a constants file's `link_us` and
`link_gbps` (nothing multi-socket is measured on a single-socket guest).

A host with none of them is one line naming the experiment to run.
"""  # noqa: E501 (the table's rows)

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from socketlab import paths
from socketlab.errors import SocketlabError, SpecError, StoreError
from socketlab.plan.stage import Constants, KvRate, Link
from socketlab.store import ok_runs_in_folder

CONSTANTS_DIR = paths.EXPERIMENTS / "models" / "constants"
SEED = CONSTANTS_DIR / "seed-oct-2026.yaml"
NUMERIC = (
    "gemv_gbps_per_core",
    "exchange_us",
    "kv_gbps",
    "act_gbps",
    "hop_us",
    "allreduce_us",
    "gemv_l3_gbps_per_core",
    "elem_ns",
    "gelu_ns",
)
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
    extra = {"link_us", "link_gbps", "kv_classes"}
    unknown = set(doc) - set(NUMERIC) - extra - {"version", "host", "kernel", "note"}
    if unknown:
        raise SpecError(
            f"{p}: {sorted(unknown)[0]}: unknown field; expected one of "
            f"{', '.join(NUMERIC)}, {', '.join(sorted(extra))}, host, kernel, note"
        )
    link = None
    if ("link_us" in doc) != ("link_gbps" in doc):
        raise SpecError(f"{p}: link_us and link_gbps: expected both or neither")
    if "link_us" in doc:
        lv = {}
        for key in ("link_us", "link_gbps"):
            entry = doc[key]
            v = entry.get("value") if isinstance(entry, dict) else entry
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                raise SpecError(f"{p}: {key}.value: expected a positive number, got {v!r}")
            lv[key] = float(v)
            prov[key] = str(entry.get("source", p)) if isinstance(entry, dict) else str(p)
        link = Link(latency_us=lv["link_us"], gbps=lv["link_gbps"])
    classes: list[KvRate] = []
    if "kv_classes" in doc:
        entry = doc["kv_classes"]
        rows = entry.get("value") if isinstance(entry, dict) else entry
        for i, row in enumerate(rows if isinstance(rows, list) else [None]):
            if (
                not isinstance(row, list)
                or len(row) not in (5, 6)
                or any(isinstance(x, bool) or not isinstance(x, int | float) for x in row)
                or any(x <= 0 for x in row[:5])
                or (len(row) == 6 and row[5] < 0)
            ):
                raise SpecError(
                    f"{p}: kv_classes.value[{i}]: expected [head_dim, group, batch, "
                    f"kv_bytes, gbps] (positive numbers) and optionally footprint "
                    f"(bytes read between two reads of the KV; 0 = warm), got {row!r}"
                )
            classes.append(
                KvRate(
                    int(row[0]),
                    int(row[1]),
                    int(row[2]),
                    float(row[3]),
                    float(row[4]),
                    float(row[5]) if len(row) == 6 else 0.0,
                )
            )
        prov["kv_classes"] = str(entry.get("source", p)) if isinstance(entry, dict) else str(p)
    return Constants(
        **values,
        host=str(doc.get("host", "")),
        kernel=str(doc.get("kernel", "")),
        kv_classes=tuple(classes),
        link=link,
        provenance=prov,
    )


@dataclass(frozen=True)
class Measured:
    value: float
    run_keys: tuple[str, ...]
    detail: str


def _runs(results: Path, host: str) -> list[dict[str, Any]]:
    """Every ok run of `host` with its metrics, over all campaigns' stores."""
    return [
        {"key": r["run_key"], **{k: v for k, v in r.items() if k != "run_key"}}
        for r in ok_runs_in_folder(results, host)
    ]


def stored_runs(results: Path, host: str) -> list[dict[str, Any]]:
    """Every ok run of `host` (key, experiment, params, argv, metrics), all campaigns."""
    return _runs(results, host)


def native_arg(run: dict, flag: str) -> str | None:
    return _arg(run, flag)


def native_binary(run: dict) -> str:
    return _binary(run)


def _native(argv: list[str]) -> list[str]:
    """The native binary's argv: a campaign runs the stage through `orchestrate layer-stage ...
    -- build/cc/layer ...`, whose binary follows the `--`."""
    return argv[argv.index("--") + 1 :] if "--" in argv and "layer-stage" in argv else argv


def _binary(run: dict) -> str:
    argv = _native(run["argv"])
    return Path(argv[0]).name if argv else ""


def _arg(run: dict, flag: str) -> str | None:
    """A flag's value, given as `--flag value` or `--flag=value` (the campaign's form)."""
    argv = _native(run["argv"])
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1 :]
    return None


def measured_constants(
    host: str,
    *,
    results: Path | None = None,
    kernel: str = "avx2",
    mode: str | None = None,
    bytes_per_core: int | None = None,
    batch: int | None = None,
    exclude_shape: str | None = None,
    elems: float | None = None,
    kv_bytes: float | None = None,
    repetition: int | None = None,
    head_dim: int | None = None,
    group: int | None = None,
) -> dict[str, Measured]:
    """What the store holds for `host`, constant by constant (missing ones absent). The GEMV
    rate depends on the tier a slice lives in: with `bytes_per_core` the slice run nearest that
    size gives it, else the median over all slice runs. The element costs (elem_ns, gelu_ns)
    come from slice runs of other shapes than `exclude_shape` (the stage being predicted); where
    there are some, the GEMV rate is the kernel's alone, else it absorbs the non-GEMV work;
    with `elems` (the stage's elements per row) from the shape nearest it. With `kv_bytes`, the
    kv-attn rate of the contexts nearest the stage's KV bytes per step; with `head_dim` and
    `group`, of the attention class nearest the stage's (else the class with the longest
    context). With `repetition`, that repetition's runs only (a bench pairs each stage run with
    the constants measured next to it)."""
    runs = _runs(Path(results or paths.RESULTS), host)
    if repetition is not None:
        runs = [r for r in runs if r["repetition"] == repetition]
    found: dict[str, Measured] = {}
    slices = [
        r
        for r in runs
        if _binary(r) == "layer"
        and _arg(r, "--slice")
        and not _arg(r, "--ctx")  # a shortened context measures attention (kv-attn)
        and (_arg(r, "--gemv") or "avx2") == kernel
    ]
    # the element costs from every slice, --ctx ones too (their non-GEMV phases are the same)
    found.update(
        _elements(
            [
                r
                for r in runs
                if _binary(r) == "layer"
                and _arg(r, "--slice")
                and (_arg(r, "--gemv") or "avx2") == kernel
            ],
            batch,
            exclude_shape,
            kernel,
            elems,
            kv_bytes,
        )
    )
    pure = "elem_ns" in found
    gemv = [r for r in slices if batch is None or int(_arg(r, "--batch") or 1) == batch]
    rate = _gemv_rate(gemv, pure, bytes_per_core, kernel)
    if rate:
        found["gemv_gbps_per_core"] = rate
    found.update(_exchange_constants(runs, mode))
    stream = _kv_stream(runs)
    if stream:
        found["kv_gbps"] = stream
    attn = _kv_attention(runs, kernel, batch, kv_bytes, head_dim, group)
    if attn:
        found["kv_gbps"] = attn
    return found


def _gemv_rate(
    gemv: list[dict], pure: bool, bytes_per_core: int | None, kernel: str
) -> Measured | None:
    """The GEMV rate per core: the median over the slice runs (those nearest `bytes_per_core`
    where given); `pure`: the weight phases' GEMV p50s, else the step less attention."""
    rates = []
    for r in gemv:
        nb = sum(v for n, v, d in r["metrics"] if n == "phase_weight_bytes")
        if pure:  # the weight phases' GEMV p50s: the kernel alone (elem_ns has the rest)
            us = sum(
                v
                for n, v, d in r["metrics"]
                if n == "phase_gemv_p50" and d.get("phase") not in ("attention", "combine")
            )
        else:
            # The slice's step p50 less attention's q.K / P.V (the KV term's): the weight
            # phases with their norms and activations, as the stage runs them. p50s, not
            # the phase means: one descheduled step on a shared host swamps a mean.
            step = [v for n, v, d in r["metrics"] if n == "step_p50"]
            att = sum(
                v
                for n, v, d in r["metrics"]
                if n == "phase_gemv_p50" and d.get("phase") in ("attention", "combine")
            )
            us = step[0] - att if step else 0.0
        if us > 0:
            rates.append((nb / (us * 1e3), r["key"], nb))
    if rates and bytes_per_core:
        near = min(abs(nb - bytes_per_core) for _, _, nb in rates)
        rates = [r for r in rates if abs(r[2] - bytes_per_core) == near]
    if not rates:
        return None
    rates.sort()
    mid = rates[len(rates) // 2]
    return Measured(
        mid[0],
        tuple(k for _, k, _ in rates),
        f"layer --slice --gemv {kernel}: median of {len(rates)} runs, "
        f"{int(mid[2]):,} B per worker, "
        + ("weight phases' GEMV p50" if pure else "step p50 less attention"),
    )


def _exchange_constants(runs: list[dict], mode: str | None) -> dict[str, Measured]:
    """exchange_us (the fastest mode, or `mode`, at 2,560 B) and act_gbps (the same mode and
    participants at the largest vector measured)."""
    found: dict[str, Measured] = {}
    xch: dict[tuple[str, int, int], list[tuple[float, str]]] = {}
    for r in runs:
        if _binary(r) != "exchange":
            continue
        for n, v, d in r["metrics"]:
            if n == "latency_p50" and d.get("participants", 0) >= 2 and d.get("mode") != "pingpong":
                xch.setdefault((d["mode"], d["participants"], int(d["bytes"])), []).append(
                    (v, r["key"])
                )
    base = {k: v for k, v in xch.items() if k[2] == BASE_BYTES and (mode is None or k[0] == mode)}
    if not base:
        return found
    (m, parts, _), vals = min(base.items(), key=lambda kv: _median(kv[1]))
    found["exchange_us"] = Measured(
        _median(vals),
        tuple(k for _, k in vals),
        f"exchange --mode {m}, {parts} participants, 2,560 B",
    )
    big = {k: v for k, v in xch.items() if k[:2] == (m, parts) and k[2] > BASE_BYTES}
    if big:
        (_, _, nb), bvals = max(big.items(), key=lambda kv: kv[0][2])
        dt = _median(bvals) - _median(vals)
        if dt > 0:
            found["act_gbps"] = Measured(
                (nb - BASE_BYTES) / (dt * 1e3),
                tuple(k for _, k in vals + bvals),
                f"exchange --mode {m}, {parts} participants, {nb:,} B vs 2,560 B",
            )
    return found


def _kv_stream(runs: list[dict]) -> Measured | None:
    """kv_gbps from kvstream's kv_bw (else, on AVX2-only hosts, the kv-read ladder's), at the
    longest context measured; the kv-attn rate, where there is one, replaces it."""
    kv = [
        (r, v) for r in runs if _binary(r) == "kvstream" for n, v, d in r["metrics"] if n == "kv_bw"
    ]
    source = "kvstream"
    if not kv:  # AVX2-only hosts: the ladder's read of the KV bytes (no attention arithmetic)
        kv = [
            (r, v)
            for r in runs
            if _binary(r) == "ladder" and r["experiment"] == "kv-read"
            for n, v, d in r["metrics"]
            if n == "bw_total"
        ]
        for r, _ in kv:
            r["argv"] = [*r["argv"], "--tokens", str(r["params"].get("context", 0))]
        source = "ladder --kernel avx2-read of the KV bytes (experiment kv-read)"
    if not kv:
        return None
    most = max(int(_arg(r, "--tokens") or 0) for r, _ in kv)
    vals = [(v, r["key"]) for r, v in kv if int(_arg(r, "--tokens") or 0) == most]
    return Measured(
        _median(vals),
        tuple(dict.fromkeys(k for _, k in vals)),
        f"{source}, {most} tokens: median of {len(vals)} values",
    )


def _nongemv(r: dict) -> dict[str, float]:
    """Per phase, phase_compute - phase_gemv: the phase's work outside the GEMV kernels."""
    comp = {d.get("phase"): v for n, v, d in r["metrics"] if n == "phase_compute"}
    gemv = {d.get("phase"): v for n, v, d in r["metrics"] if n == "phase_gemv"}
    return {p: comp[p] - gemv.get(p, 0.0) for p in comp}


def _elements(
    slices: list[dict],
    batch: int | None,
    exclude_shape: str | None,
    kernel: str,
    elems: float | None = None,
    kv_bytes: float | None = None,
) -> dict[str, Measured]:
    """elem_ns and gelu_ns from the stage's own per-phase timers in `layer --slice` runs of
    other shapes than `exclude_shape` (the norms, RoPE, combine and gelu are native/layer's own
    code; no microbenchmark runs them). Per run: the phase means outside the kernels
    (phase_compute - phase_gemv) split the work: qkv + attention + combine do the input norm
    (H), the q/k/v head norms and RoPE (QD + 2 KD) and the combine (QD / W) per row, giving
    elem_ns; gateup + ple_gate do the gelus ((I + P) / W) and 6 H of norms and residuals
    (at elem_ns), giving gelu_ns. A descheduled step adds to both estimates of the run's whole
    non-GEMV time, the means' and step_p50 less the phases' GEMV p50s (the means on a short
    step, where one preemption swamps 100 steps' mean; the p50 gap on a long one, where most
    steps are preempted), so both are scaled to the smaller of the two. The runs of the shape
    nearest in elements per row (`elems`, else all), among them those nearest in KV bytes per
    step (`kv_bytes`: streaming the KV evicts the vectors and norm weights the element work
    reads), at `batch` where there are any; medians over them."""
    from socketlab.layer.shapes import load_shape  # the shape files name the dimensions

    pts: list[tuple[int, float, float, float, str, str, float]] = []
    for r in slices:
        shape = next((d.get("shape") for n, _, d in r["metrics"] if n == "step_p50"), None)
        if not shape or shape == exclude_shape:
            continue
        try:
            sh = load_shape(str(shape))
        except SocketlabError:
            continue  # a dump of a shape this checkout has no file for
        b = int(_arg(r, "--batch") or 1)
        w = int(str(_arg(r, "--slice")).split("/")[1])
        h, qd, kd = sh.hidden, sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
        ng = _nongemv(r)
        elem = (
            sum(ng.get(p, 0.0) for p in ("qkv", "attention", "combine"))
            * 1e3
            / (b * (h + qd + 2 * kd + qd / w))
        )
        # the vectorized gelu costs ~0.4 ns an element: within noise of the norms' share, so
        # the remainder may come out at or below zero; clamp it rather than drop the run
        gel = max(
            0.0,
            (sum(ng.get(p, 0.0) for p in ("gateup", "ple_gate")) * 1e3 - elem * b * 6 * h)
            / (b * (sh.inter + sh.ple) / w),
        )
        # the stage model's counts (socketlab.plan.stage_model): 8 H + QD + 2 KD + QD / W
        n_elem = 8 * h + qd + 2 * kd + qd / w
        n_gelu = (sh.inter + sh.ple) / w
        step = [v for n, v, _ in r["metrics"] if n == "step_p50"][0]
        p50 = step - sum(v for n, v, _ in r["metrics"] if n == "phase_gemv_p50")
        model = b * (n_elem * elem + n_gelu * gel) / 1e3
        if elem > 0 and p50 > 0:
            f = min(1.0, p50 / model)
            kvb = sum(v for n, v, _ in r["metrics"] if n == "kv_bytes_per_step")
            pts.append((b, elem * f, gel * f, n_elem + n_gelu, r["key"], str(shape), kvb))
    if batch is not None and any(p[0] == batch for p in pts):
        pts = [p for p in pts if p[0] == batch]
    if pts and elems:
        near = min(abs(p[3] - elems) for p in pts)
        pts = [p for p in pts if abs(p[3] - elems) == near]
    if pts and kv_bytes:

        def dist(p: tuple) -> float:
            return abs(math.log(max(p[6], 1.0) / max(kv_bytes, 1.0)))

        kv_near = min(dist(p) for p in pts)
        pts = [p for p in pts if dist(p) == kv_near]
    if not pts:
        return {}
    keys = tuple(p[4] for p in pts)
    where = (
        f"layer --slice --gemv {kernel} of {', '.join(sorted({p[5] for p in pts}))}, "
        f"{int(pts[0][6]):,} B of KV per step "
        f"({len(pts)} runs), phase_compute - phase_gemv, at most step_p50 - GEMV p50s"
    )
    return {
        "elem_ns": Measured(
            _median([(p[1], "") for p in pts]),
            keys,
            f"{where}: qkv + attention + combine per vector element",
        ),
        "gelu_ns": Measured(
            _median([(p[2], "") for p in pts]),
            keys,
            f"{where}: gateup + ple_gate per gelu'd element",
        ),
    }


def _kv_class(r: dict) -> tuple[int, int, str] | None:
    """A kv-attn run's attention class: (head_dim, group, dump shape), from the run's params
    (bench/stage_plan_host.py's class dumps) or the shape file its metrics name."""
    from socketlab.layer.shapes import load_shape

    shape = next((str(d.get("shape")) for n, _, d in r["metrics"] if n == "kv_bytes_per_step"), "")
    p = r.get("params") or {}
    if p.get("head_dim") and p.get("group"):
        return int(p["head_dim"]), int(p["group"]), shape
    try:
        sh = load_shape(shape)
    except SocketlabError:
        return None
    return sh.head_dim, max(sh.heads // max(sh.kv_heads, 1), 1), shape


def _rotated_bytes(r: dict, kvb: float) -> float:
    """The bytes a kv-attn run reads between two reads of the same KV: its rotated copies
    (native/layer --kv-copies N, or --kv-cold-mib M: as many copies as make >= M MiB); 0 for
    one copy (warm)."""
    copies = int(_arg(r, "--kv-copies") or 1)
    mib = int(_arg(r, "--kv-cold-mib") or 0)
    if mib and kvb > 0:
        copies = max(math.ceil(mib * 1048576 / kvb), 1)
    return kvb * copies if copies > 1 else 0.0


def _kv_points(
    runs: list[dict], kernel: str, *, warm_only: bool = False
) -> dict[tuple[int, int, str], dict[int, dict[tuple[int, float], list[tuple[float, float, str]]]]]:
    """kv-attn runs by class (head_dim, group, shape), batch, (context, rotated bytes: 0 warm,
    else the rotated copies' bytes): (KV bytes per step, attention phase_gemv_p50, run key)."""
    out: dict = {}
    for r in runs:
        if not (
            _binary(r) == "layer"
            and _arg(r, "--slice")
            and _arg(r, "--ctx")
            and (_arg(r, "--gemv") or "avx2") == kernel
        ):
            continue
        kvb = [v for n, v, _ in r["metrics"] if n == "kv_bytes_per_step"]
        att = [
            v for n, v, d in r["metrics"] if n == "phase_gemv_p50" and d.get("phase") == "attention"
        ]
        cls, ctx = _kv_class(r), _arg(r, "--ctx")
        if kvb and att and cls and ctx is not None:  # a rate is per context: none, no rate
            rotated = _rotated_bytes(r, kvb[0])
            if warm_only and rotated:
                continue
            b = int(_arg(r, "--batch") or 1)
            out.setdefault(cls, {}).setdefault(b, {}).setdefault((int(ctx), rotated), []).append(
                (kvb[0], att[0], r["key"])
            )
    return out


def kv_classes(runs: list[dict], kernel: str) -> list[tuple[KvRate, tuple[str, ...]]]:
    """Every class's attention rate per batch and context (kv-attn runs): KV bytes per step /
    attention p50 (the median repetition), with the run keys. A ratio at one size, not the
    difference of two (kv_gbps's): it keeps attention's fixed work per step (a short window's
    is most of it) and is not the difference of two noisy p50s; the class dumps are run at
    contexts that bracket the shipped shapes' KV bytes per step, and the rate moves with the
    tier (at B=16, 1.2 GB/s at 8 MiB against 3.7 at 2 MiB for (256, 8) on the 2-vCPU guest),
    so a stage takes the context nearest its own bytes. Runs with rotated KV copies give the
    class's cold points (`KvRate.footprint`): a stage whose weights stream past its KV every
    step reads the KV at that rate, not the warm one (`stage.kv_evicted`)."""
    out = []
    for (hd, grp, _), by_b in sorted(_kv_points(runs, kernel).items()):
        for b, by_ctx in sorted(by_b.items()):
            for (_ctx, rotated), xs in sorted(by_ctx.items()):
                att = _median([(x[1], x[2]) for x in xs])
                if att > 0:
                    out.append(
                        (
                            KvRate(hd, grp, b, xs[0][0], xs[0][0] / (att * 1e3), rotated),
                            tuple(x[2] for x in xs),
                        )
                    )
    return out


def measured_kv_classes(
    host: str, *, results: Path | None = None, kernel: str = "avx2", repetition: int | None = None
) -> tuple[tuple[KvRate, ...], str]:
    """`kv_classes` of a host's stored runs (one repetition's with `repetition`), and their
    provenance (the run keys)."""
    runs = _runs(Path(results or paths.RESULTS), host)
    if repetition is not None:
        runs = [r for r in runs if r["repetition"] == repetition]
    found = kv_classes(runs, kernel)
    keys = sorted({k[:12] for _, ks in found for k in ks})
    classes = sorted({(k.head_dim, k.group) for k, _ in found})
    cold = sum(1 for k, _ in found if k.cold)
    return tuple(k for k, _ in found), (
        f"layer --slice --ctx attention p50 (kv-attn) per class (head_dim, group) "
        f"{', '.join(f'({h}, {g})' for h, g in classes)}: KV bytes / attention p50 at "
        f"{len(found)} (class, batch, context) points, {cold} of them with rotated KV copies "
        f"(cold); runs {', '.join(keys)}"
    )


def _kv_attention(
    runs: list[dict],
    kernel: str,
    batch: int | None,
    kv_bytes: float | None = None,
    head_dim: int | None = None,
    group: int | None = None,
) -> Measured | None:
    """The stage's own attention rate: `layer --slice ... --ctx N` runs (experiment kv-attn) of
    one dump at two or more contexts and the same batch: (KV bytes per step at the longer -
    at the shorter) / (attention's phase_gemv_p50 difference). On the portable kernel this is
    the FP32 q.K / P.V arithmetic, 15x slower than a plain read of the same bytes, so it is
    preferred to kvstream / ladder where it was measured. The rate depends on the tier the KV
    bytes live in: with `kv_bytes` (the stage's KV bytes per step) the pair of adjacent
    contexts whose geometric-mean bytes are nearest it, else the shortest and the longest.
    Runs of one class only: with `head_dim` and `group` the nearest measured (log2 distances
    summed), else the class with the longest context measured."""
    by_cls = _kv_points(runs, kernel, warm_only=True)
    if not by_cls:
        return None
    if head_dim and group:

        def d(c: tuple[int, int, str]) -> float:
            return abs(math.log2(c[0] / head_dim)) + abs(math.log2(c[1] / group))

        cls = min(by_cls, key=lambda c: (d(c), c))
    else:
        cls = max(by_cls, key=lambda c: (max(x for b in by_cls[c].values() for x in b), c))
    pts: dict[int, list[tuple[int, float, float, str]]] = {
        b: [(ctx, kvb, att, key) for (ctx, _), xs in by_ctx.items() for kvb, att, key in xs]
        for b, by_ctx in by_cls[cls].items()
    }
    if batch in pts:
        b = batch
    elif pts:
        b = min(pts, key=lambda x: abs(x - (batch or 1)))
    else:
        return None
    by_ctx: dict[int, list[tuple[int, float, float, str]]] = {}
    for p in pts[b]:
        by_ctx.setdefault(p[0], []).append(p)
    if len(by_ctx) < 2:
        return None
    ctxs = sorted(by_ctx)
    pair = (ctxs[0], ctxs[-1])
    if kv_bytes:
        pairs = list(zip(ctxs, ctxs[1:], strict=False))
        pair = min(
            pairs,
            key=lambda c: abs(
                math.log(kv_bytes / math.sqrt(by_ctx[c[0]][0][1] * by_ctx[c[1]][0][1]))
            ),
        )
    lo, hi = by_ctx[pair[0]], by_ctx[pair[1]]
    # the median repetition at each context (repetitions of a loaded host spread widely)
    dt = _median([(x[2], x[3]) for x in hi]) - _median([(x[2], x[3]) for x in lo])
    if dt <= 0:
        return None
    return Measured(
        (hi[0][1] - lo[0][1]) / (dt * 1e3),
        tuple(x[3] for x in lo + hi),
        f"layer --slice --ctx attention p50 (kv-attn) of {cls[2]} (head_dim "
        f"{cls[0]}, group {cls[1]}): {pair[0]} vs {pair[1]} positions at B={b}, "
        f"median of {len(lo)} / {len(hi)} runs",
    )


def constants_from_store(
    host: str,
    *,
    results: Path | None = None,
    kernel: str = "avx2",
    hop_us: float = 5.0,
    allreduce_us: float = 10.0,
    batch: int | None = None,
    exclude_shape: str | None = None,
) -> Constants:
    """The host's constants; the GEMV rate from slice runs at `batch` where there are any."""
    found = measured_constants(host, results=results, kernel=kernel, exclude_shape=exclude_shape)
    at_b = (
        measured_constants(
            host, results=results, kernel=kernel, batch=batch, exclude_shape=exclude_shape
        )
        if batch
        else {}
    )
    for k in ("gemv_gbps_per_core", "kv_gbps", "elem_ns", "gelu_ns"):
        if k in at_b:
            found[k] = at_b[k]
    missing = [k for k in REQUIRED if k not in found]
    if missing:
        where = Path(results or paths.RESULTS)
        raise StoreError(
            f"host {host}: no measured {missing[0]} in {where}/*/store.sqlite; run "
            f"{EXPERIMENT[missing[0]]} on it first (or pass --constants FILE)"
        )
    prov = {
        k: f"{m.detail}; runs {', '.join(x[:12] for x in m.run_keys)}" for k, m in found.items()
    }
    prov["hop_us"] = prov["allreduce_us"] = "assumed (flag): no multi-socket link measured"
    classes, prov["kv_classes"] = measured_kv_classes(host, results=results, kernel=kernel)
    return Constants(
        gemv_gbps_per_core=found["gemv_gbps_per_core"].value,
        exchange_us=found["exchange_us"].value,
        kv_gbps=found["kv_gbps"].value,
        act_gbps=found["act_gbps"].value,
        elem_ns=found["elem_ns"].value if "elem_ns" in found else 0.0,
        gelu_ns=found["gelu_ns"].value if "gelu_ns" in found else 0.0,
        hop_us=hop_us,
        allreduce_us=allreduce_us,
        kv_classes=classes,
        host=host,
        kernel=kernel,
        provenance=prov,
    )


def _median(vals: list[tuple[float, str]]) -> float:
    xs = sorted(v for v, _ in vals)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
