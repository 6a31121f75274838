"""Load a campaign, pivot its sweeps, plot them: the quickstart's ladder read bandwidth by
working set and kernel, and sysbench's events/s by prime limit and threads.

    .venv/bin/python docs/examples/sweep_plot.py quickstart -o sweep.png
    .venv/bin/python docs/examples/sweep_plot.py results/quickstart      # a folder works too

The medians are over the repetitions stored ok (warm-ups left out); the title names the host's
CPU and when the runs started, from the campaign's own records.
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402

from socketlab import results  # noqa: E402


def pivots(res: results.Results) -> dict[str, object]:
    """The two sweeps as tables: medians per (row value, column value)."""
    m = res.metrics_with_runs(ok_only=True)
    m = m[m["repetition"] >= 0]
    # ladder prints bw_total per rep and summarised (stat=median, best): one per run
    ladder = m[(m["experiment"] == "ladder-read") & (m["metric"] == "bw_total")
               & (m["dim.stat"] == "median")]
    sysbench = m[(m["experiment"] == "sysbench-cpu") & (m["metric"] == "events_per_second")]
    return {
        "ladder": ladder.pivot_table(index="size", columns="kernel", values="value",
                                     aggfunc="median", observed=True),
        "sysbench": sysbench.pivot_table(index="prime", columns="threads", values="value",
                                         aggfunc="median", observed=True),
    }


def where_and_when(res: results.Results) -> str:
    """'Intel(R) Xeon(R) Processor, 2 cores; 2026-12-05' from the campaign's host records."""
    hosts = []
    for host in res.runs["host"].unique():
        path = res.folder / "hosts" / f"{host}.json"
        topo = json.loads(path.read_text()).get("topology", {}) if path.exists() else {}
        hosts.append(f"{host}: {topo.get('cpu_model', '?')}, {topo.get('cores', '?')} cores")
    day = res.runs["started"].min().strftime("%Y-%m-%d")
    return f"{'; '.join(hosts)}; runs of {day}"


def plot(res: results.Results, out: str) -> dict[str, object]:
    tables = pivots(res)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    tables["ladder"].plot.bar(ax=left, rot=0)
    left.set(title="ladder read bandwidth (median)", xlabel="working set per core",
             ylabel="GB/s")
    tables["sysbench"].plot.bar(ax=right, rot=0)
    right.set(title="sysbench CPU (median)", xlabel="--cpu-max-prime", ylabel="events/s")
    right.legend(title="threads")
    for ax in (left, right):
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{res.campaign}: {where_and_when(res)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", default="quickstart",
                        help="campaign name, results folder, campaign folder or store file")
    parser.add_argument("-o", "--output", default="sweep.png", help="PNG to write")
    args = parser.parse_args()
    res = results.load(args.source)
    for name, table in plot(res, args.output).items():
        # two decimals in every cell (to_string alone drops a column's common trailing zeros)
        print(f"{name}:\n{table.to_string(float_format=lambda v: f'{v:.2f}')}\n")
    print(f"plot written to {args.output}")


if __name__ == "__main__":
    main()
