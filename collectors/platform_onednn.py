"""oneDNN kernel-selection traces (ONEDNN_VERBOSE) and the AMX verdict per precision (stdlib).

The one copy of the parser and the verdict: the host tool platform_amx.py imports it beside
itself, and the controller (socketlab.platform.onednn, ``orchestrate platform amx --trace``)
loads this file by path, so a trace is judged the same wherever it is judged. Runs on the
hosts' Python (3.9 and later, no packages).

Why not grep for "amx": oneDNN names every JIT kernel after the ISA level it was generated for,
so on an AMX machine an FP32 GELU eltwise prints ``jit:avx10_1_512_amx`` without touching a tile.
Tiles only run in the compute primitives (matmul, inner product, convolution) on bf16/f16/int8
data, so the verdict looks at exactly those lines and at their data types.

Formats read: v1 lines of oneDNN 3.x (``onednn_verbose,v1,primitive,exec,cpu,matmul,...``),
the older ``onednn_verbose,exec,cpu,...`` and ``dnnl_verbose``/``mkldnn_verbose`` lines, with or
without a timestamp field; memory descriptors as ``src:bf16::blocked...`` (3.x) or
``src_bf16::blocked...`` (2.x). Implementation names of every generation count as AMX when they
carry an amx ISA: ``brg_matmul:avx10_1_512_amx``, ``brgemm:avx512_core_amx``,
``brg:avx512_core_amx_fp16``, ``brgconv:avx512_core_amx``, ``jit:avx512_core_amx``,
``brgemm_avx512_amx``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PREFIXES = ("onednn_verbose", "dnnl_verbose", "mkldnn_verbose")
#: primitives that can run on AMX tiles; everything else (eltwise, reorder, softmax, ...) only
#: reports the ISA level its vector code was generated for
COMPUTE = frozenset({"matmul", "inner_product", "convolution", "deconvolution"})
PRECISIONS = ("bf16", "int8", "fp32")
EXECUTING = "AMX executing"
NOT_USED = "AMX not used"

_AMX_IMPL = re.compile(r"(^|[:_])(avx10_\d+_512_amx|avx512_core_amx|avx512_amx|amx)")
_MD = re.compile(
    r"^(?P<arg>[a-z_]+?)[_:](?P<dt>f32|bf16|f16|s8|u8|s32|f64|f8_e5m2|f8_e4m3|s4|u4)"
    r"(?=[:_]|$)"
)


@dataclass(frozen=True)
class Primitive:
    primitive: str  #: matmul, inner_product, eltwise, reorder, ...
    implementation: str  #: brg_matmul:avx10_1_512_amx, gemm:jit, ...
    dtypes: dict[str, str]  #: argument (src, wei, dst, bia, data) -> data type
    attributes: str
    line: int

    @property
    def compute(self) -> bool:
        return self.primitive in COMPUTE

    @property
    def amx_impl(self) -> bool:
        return bool(_AMX_IMPL.search(self.implementation))

    @property
    def precision(self) -> str | None:
        """bf16, int8, f16 or fp32 from the source and weight types; None if neither is known."""
        src = self.dtypes.get("src") or self.dtypes.get("data")
        wei = self.dtypes.get("wei")
        kinds = {t for t in (src, wei) if t}
        if not kinds:
            return None
        if "bf16" in kinds:
            return "bf16"
        if "f16" in kinds:
            return "f16"
        if kinds <= {"u8", "s8"}:
            return "int8"
        if kinds == {"f32"}:
            return "fp32"
        return "/".join(sorted(kinds))

    @property
    def uses_tiles(self) -> bool:
        """An AMX implementation of a compute primitive on data AMX has tiles for. FP32 counts
        only under a bf16 fpmath attribute (oneDNN then down-converts to bf16 tiles)."""
        if not (self.compute and self.amx_impl):
            return False
        if self.precision in ("bf16", "f16", "int8"):
            return True
        return self.precision == "fp32" and "fpmath:bf16" in self.attributes


@dataclass
class Trace:
    version: str | None = None
    isa: str | None = None  #: oneDNN's own line: the ISA it dispatches to on this host
    primitives: list[Primitive] = field(default_factory=list)


def parse_trace(text: str) -> Trace:
    """Every executed primitive of a trace; other lines (warnings, program output) are skipped."""
    trace = Trace()
    for number, raw in enumerate(text.splitlines(), 1):
        fields = raw.strip().split(",")
        if not fields or fields[0] not in PREFIXES:
            continue
        rest = fields[1:]
        if rest and rest[0] == "v1":
            rest = rest[1:]
        if rest and _is_number(rest[0]):  # ONEDNN_VERBOSE_TIMESTAMP=1
            rest = rest[1:]
        if rest and rest[0] == "info":
            _info(trace, rest[1:])
            continue
        if rest and rest[0] == "primitive":
            rest = rest[1:]
        if len(rest) < 6 or rest[0] != "exec" or rest[1] not in ("cpu", "gpu"):
            continue  # create:cache_hit lines, graph lines, templates
        primitive, impl, mds = rest[2], rest[3], rest[5]
        attrs = rest[6] if len(rest) > 6 else ""
        trace.primitives.append(Primitive(primitive, impl, _dtypes(mds), attrs, number))
    return trace


def _info(trace: Trace, rest: list[str]) -> None:
    if rest and rest[0].startswith("oneDNN v"):
        trace.version = rest[0].split()[1]
    elif len(rest) >= 2 and rest[0] == "cpu" and rest[1].startswith("isa:"):
        trace.isa = ",".join(rest[1:]).removeprefix("isa:")  # ISA names may hold commas
    elif rest and rest[0].startswith(("DNNL v", "Intel MKL-DNN v")):
        trace.version = rest[0].split()[-1].split()[0]


def _dtypes(mds: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in mds.split():
        match = _MD.match(token)
        if match:
            out.setdefault(match["arg"], match["dt"])
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Verdict:
    precision: str
    verdict: str  #: EXECUTING or NOT_USED
    implementations: tuple[str, ...]  #: of the compute primitives at this precision
    isa: str | None
    host_amx: bool | None  #: CPUID (amx_tile flag); None when unknown
    reason: str
    control: bool = False  #: a forced-no-AMX run: its verdict must be NOT_USED

    @property
    def executing(self) -> bool:
        return self.verdict == EXECUTING

    @property
    def control_ok(self) -> bool | None:
        return (not self.executing) if self.control else None


def host_has_amx(flags: list[str] | set[str] | None) -> bool | None:
    return None if flags is None else "amx_tile" in set(flags)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """The first CPU's flags; None where /proc/cpuinfo has none (non-x86)."""
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                if line.startswith("flags"):
                    return line.split(":", 1)[1].split()
    except OSError:
        return None
    return None


def trace_lines(text: str) -> list[str]:
    """The oneDNN verbose lines of a process's output (what parse_trace reads), in order."""
    return [line.strip() for line in text.splitlines() if line.strip().split(",", 1)[0] in PREFIXES]


def verdict(
    trace: Trace,
    precision: str,
    host_flags: list[str] | set[str] | None = None,
    control: bool = False,
) -> Verdict:
    """The AMX verdict for one precision of one trace (see the module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    mine = [p for p in trace.primitives if p.compute and p.precision == precision]
    impls = tuple(dict.fromkeys(p.implementation for p in mine))
    tiles = [p for p in mine if p.uses_tiles]
    amx = host_has_amx(host_flags)
    isa = trace.isa
    if tiles:
        used = sorted({f"{p.primitive} {p.implementation}" for p in tiles})
        reason = f"{len(tiles)} of {len(mine)} {precision} compute executions on AMX: " + ", ".join(
            used
        )
        others = [i for i in impls if not _AMX_IMPL.search(i)]
        if others:
            reason += f" (also non-AMX: {', '.join(others)})"
        return Verdict(precision, EXECUTING, impls, isa, amx, reason, control)
    parts = []
    if amx is False:
        parts.append("no AMX on this host (CPUID has no amx_tile)")
    if mine:
        parts.append(f"{precision} compute ran {', '.join(impls)}")
    else:
        parts.append(f"no oneDNN matmul/inner-product/convolution on {precision} data ran")
    ignored = sorted(
        {
            f"{p.primitive} {p.implementation}"
            for p in trace.primitives
            if p.amx_impl and not p.uses_tiles
        }
    )
    if ignored:
        parts.append(f"not counted (ISA level, no tiles): {', '.join(ignored)}")
    parts.append(f"oneDNN ISA: {isa}" if isa else "oneDNN printed no ISA line")
    return Verdict(precision, NOT_USED, impls, isa, amx, "; ".join(parts), control)


def record(run: str, v: Verdict) -> dict[str, Any]:
    """The JSON-lines metric record of one verdict (one ``amx_executing`` metric per run, the
    dimensions the platform report shows)."""
    return {
        "type": "metric",
        "name": "amx_executing",
        "value": int(v.executing),
        "unit": "bool",
        "run": run,
        "precision": v.precision,
        "verdict": v.verdict,
        "implementation": ",".join(v.implementations) or "none",
        "isa": v.isa or "unknown",
        "host_amx": {True: "yes", False: "no", None: "unknown"}[v.host_amx],
        "control": "yes" if v.control else "no",
        "reason": v.reason,
    }


def line(run: str, v: Verdict) -> str:
    """One verdict as a line of text (``orchestrate platform amx`` without --jsonl)."""
    tag = " (negative control)" if v.control else ""
    return f"{run:<14} {v.precision:<5} {v.verdict}{tag}: {v.reason}"
