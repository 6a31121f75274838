"""How long the results store takes to insert metric rows: 1,000,000 by default.

Rows go in the way the runner writes them: per run, one transaction holding the run and its
metrics (``Store.add_run``). Prints the seconds and rows/s.

    .venv/bin/python bench/store_insert.py [--rows 1000000] [--per-run 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from socketlab.parse import Metric
from socketlab.store import RunRecord, Store


def insert_rows(rows: int = 1_000_000, per_run: int = 1000, folder: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        store = Store(Path(tmp) / "store.sqlite")
        runs = max(1, rows // per_run)
        metrics = [
            Metric(f"m{i % 20}", float(i), "GB/s", {"cpu": i % 64}, "jsonl/1")
            for i in range(per_run)
        ]
        t0 = time.perf_counter()
        for r in range(runs):
            record = RunRecord(
                run_key=f"{r:064x}",
                campaign="bench",
                experiment="e",
                host="h",
                repetition=r % 5,
                params={"size": r % 7, "threads": r % 3},
                status="ok",
            )
            store.add_run(record, metrics)
        seconds = time.perf_counter() - t0
        count = store.metric_count()
        t1 = time.perf_counter()
        frame_rows = len(store.metrics_frame("bench"))
        frame_s = time.perf_counter() - t1
        store.close()
    return {
        "rows": count,
        "runs": runs,
        "seconds": seconds,
        "rows_per_s": count / seconds,
        "frame_rows": frame_rows,
        "frame_s": frame_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-run", type=int, default=1000)
    args = parser.parse_args()
    r = insert_rows(args.rows, args.per_run)
    print(
        f"store insert: {r['rows']:,} metric rows in {r['runs']:,} runs: {r['seconds']:.2f} s "
        f"({r['rows_per_s']:,.0f} rows/s; target < 15 s); metrics_frame of all rows: "
        f"{r['frame_s']:.2f} s"
    )


if __name__ == "__main__":
    main()
