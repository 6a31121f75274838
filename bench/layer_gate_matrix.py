"""The stage's gate over its modes on this machine: every mode x kernel x batch x workers, and a
planted error in each mode, as one table (docs/runs/).

    .venv/bin/python bench/layer_gate_matrix.py BUILD --dumps DIR [--kernels avx512,amx]
        [--modes copies,cold,...] [--steps N]

BUILD holds native/layer (make -C native BUILD=... BUILD/layer). Dumps are generated into DIR
once (orchestrate layer-dump, seed 3, 16 rows): tiny-full 512 (full attention), tiny 100
(sliding), tiny-moe 256 (the MoE block, k_eq_v, no per-layer input), tiny 100 TP2 rank 1. A kernel
the CPU lacks prints the binary's "not available on this host" line. Each
row: the worst boundary's ratio of rel RMS to its limit over the mode's runs (must be <= 1), the
copies checked, and what the planted error printed (must fail, exit 1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: mode -> (the layer's flags, the planted error that must fail it, what the gate must name;
#: the dumps it runs on: the dense ones unless named)
MODES: dict[str, tuple[list[str], str, str] | tuple[list[str], str, str, tuple[str, ...]]] = {
    "one-copy": ([], "perturb-row", "boundary q"),
    "copies": (["--kv-copies", "4"], "corrupt-copy", "kv copy"),
    "cold": (["--kv-cold-mib", "64"], "corrupt-copy", "gate failed at"),
    "path-c": (
        ["--kv-cold-mib", "64", "--prefetch-dist", "8", "--prefetch-hint", "t0"],
        "corrupt-copy",
        "gate failed at",
    ),
    "one-tile": (["--kv-tile-kib", "0"], "drop-combine", "boundary attn"),
    "nta": (
        ["--prefetch-hint", "nta", "--prefetch-dist", "8", "--kv-tile-kib", "64"],
        "perturb-row",
        "boundary q",
    ),
    "staging": (
        ["--kv-stage-kib", "64", "--prefetch-hint", "t2", "--prefetch-dist", "0"],
        "perturb-row",
        "boundary q",
    ),
    "moe": ([], "swap-expert", "boundary rw", ("moe",)),
    "moe-copies": (["--kv-copies", "4"], "corrupt-copy", "kv copy", ("moe",)),
    "tp": ([], "drop-rest", "boundary h1", ("tp2-r1",)),
}
#: name -> (shape, context[, tp, rank])
DUMPS = {
    "full": ("tiny-full", 512),
    "sliding": ("tiny", 100),
    "moe": ("tiny-moe", 256),
    "tp2-r1": ("tiny", 100, 2, 1),
}
DENSE = ("full", "sliding")


def dump(dumps: Path, name: str) -> Path:
    shape, context, *tp = DUMPS[name]
    out = dumps / (f"{shape}-c{context}-b16-s3" + (f"-tp{tp[0]}r{tp[1]}" if tp else ""))
    if not (out / "meta.json").is_file():
        orchestrate = Path(sys.executable).parent / "orchestrate"
        split = ["--tp", str(tp[0]), "--rank", str(tp[1])] if tp else []
        subprocess.run(
            [
                str(orchestrate),
                "layer-dump",
                shape,
                "--context",
                str(context),
                "--batch",
                "16",
                "--seed",
                "3",
                *split,
                "--out",
                str(out),
                "--quiet",
            ],
            check=True,
        )
    return out


def run(binary: Path, args: list[str]) -> tuple[int, list[dict], str]:
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=600)
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return proc.returncode, recs, proc.stderr.strip()


def worst_ratio(recs: list[dict]) -> float:
    gate = [r for r in recs if r.get("name") == "gate_rel_rms"]
    return max(r["value"] / r["limit"] for r in gate) if gate else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", type=Path)
    ap.add_argument("--dumps", type=Path, required=True)
    ap.add_argument("--kernels", default="avx512,amx")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cpus2", default="0,1", help="the two workers' CPUs")
    a = ap.parse_args()
    binary = a.build / "layer"
    if not binary.is_file():
        print(
            f"layer_gate_matrix: error: {binary} missing (make -C native BUILD={a.build} {binary})",
            file=sys.stderr,
        )
        return 2
    a.dumps.mkdir(parents=True, exist_ok=True)
    dumps = {name: dump(a.dumps, name) for name in DUMPS}
    print(
        "| mode | layer | kernel | B=1/16 x 1/2 workers: exit, worst rel RMS / limit, "
        "copies checked | planted error (B=16, 2 workers) |"
    )
    print("|---|---|---|---|---|")
    failed = 0
    for mode in a.modes.split(","):
        flags, planted, names, *on = MODES[mode]
        for layer, path in dumps.items():
            if layer not in (on[0] if on else DENSE):
                continue
            for kernel in a.kernels.split(","):
                cells = []
                for batch in (1, 16):
                    for cpus in ("0", a.cpus2):
                        rc, recs, err = run(
                            binary,
                            [
                                "--dump",
                                str(path),
                                "--gemv",
                                kernel,
                                "--batch",
                                str(batch),
                                "--cpus",
                                cpus,
                                "--steps",
                                str(a.steps),
                                *flags,
                            ],
                        )
                        if rc == 3:
                            cells.append(err)
                            break
                        copies = next(
                            (r["value"] for r in recs if r.get("name") == "gate_kv_copies"), 0
                        )
                        cells.append(f"{rc} {worst_ratio(recs):.3f} c{copies:g}")
                        failed += rc != 0
                    if cells and "not available" in cells[-1]:
                        break
                if "not available" in cells[-1]:
                    print(f"| {mode} | {layer} | {kernel} | {cells[-1]} | - |")
                    continue
                rc, _, err = run(
                    binary,
                    [
                        "--dump",
                        str(path),
                        "--gemv",
                        kernel,
                        "--batch",
                        "16",
                        "--cpus",
                        a.cpus2,
                        "--steps",
                        str(a.steps),
                        "--debug",
                        planted,
                        *flags,
                    ],
                )
                caught = rc == 1 and names in err
                failed += not caught
                print(
                    f"| {mode} | {layer} | {kernel} | {'; '.join(cells)} | {planted}: "
                    f"exit {rc}, {err.removeprefix('layer: self-check failed: ')[:90]} |"
                )
    print(f"\n{'all passed, every planted error caught' if not failed else f'{failed} FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
