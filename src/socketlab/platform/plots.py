"""The platform report's plots: p95 and throughput vs workers, iperf3 Gbit/s vs streams (PNG)."""

from __future__ import annotations

from pathlib import Path

from socketlab.platform.tables import Data, per_machine


def write_plots(data: Data, folder: Path) -> list[Path]:
    """PNG files written into ``folder`` (only for what the campaign measured)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out: list[Path] = []
    p95 = per_machine(data, "concurrency", "latency_p95", ("workers",))
    tput = per_machine(data, "concurrency", "throughput", ("workers",))
    if p95:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        for machine in sorted({m for m, _ in p95}):
            xs = sorted(float(k[0]) for m, k in p95 if m == machine)
            left.plot(
                xs, [p95[(machine, (_key(x, p95, machine),))] for x in xs], "o-", label=machine
            )
            ys = [tput.get((machine, (_key(x, p95, machine),))) for x in xs]
            right.plot(xs, ys, "o-", label=machine)
        left.set(xlabel="workers per instance", ylabel="p95 latency (ms)", title="p95 vs workers")
        right.set(xlabel="workers per instance", ylabel="requests/s", title="throughput vs workers")
        left.legend(fontsize=7)
        out.append(_save(fig, folder / "platform-concurrency.png"))
        plt.close(fig)
    net = per_machine(data, "iperf3", "throughput", ("streams",))
    if net:
        fig, ax = plt.subplots(figsize=(5, 4))
        for machine in sorted({m for m, _ in net}):
            points = sorted((float(k[0]), v) for (m, k), v in net.items() if m == machine)
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                "o-",
                label=f"{machine} ({data.tiers.get(machine, 'host')})",
            )
        ax.set(xlabel="streams", ylabel="Gbit/s", title="iperf3 vs streams", xscale="log")
        ax.legend(fontsize=7)
        out.append(_save(fig, folder / "platform-network.png"))
        plt.close(fig)
    return out


def _key(x: float, table: dict, machine: str):
    """The stored parameter value (int or float) whose float is x."""
    return next(k[0] for m, k in table if m == machine and float(k[0]) == x)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
