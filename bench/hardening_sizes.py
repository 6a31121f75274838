"""How fast oversized specs are refused (issue 15): wall time of `load_spec` + `expand_points`
per case, on this machine. Figures go to docs/spec.md ("Limits").

    .venv/bin/python bench/hardening_sizes.py
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HEAD = "schema_version: 1\ncampaign: bench\n"


def cases() -> dict[str, str]:
    axes = "".join(f"        a{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" for i in range(7))
    many = "".join(f"  - {{name: e{i}, command: 'true'}}\n" for i in range(55_999))
    some = "".join(f"  - {{name: e{i}, command: 'true'}}\n" for i in range(1_999))
    laughs = "l0: &l0 [lol]\n" + "".join(
        f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 10)
    )
    return {
        "sweep of 10,000,000 points": HEAD + "experiments:\n  - name: a\n    command: 'true'\n"
        "    sweep:\n      matrix:\n" + axes,
        "56,000 experiments, error in the last": HEAD
        + "experiments:\n"
        + many
        + "  - {name: last, comand: 'true'}\n",
        "2,000 experiments, error in the last": HEAD
        + "experiments:\n"
        + some
        + "  - {name: last, comand: 'true'}\n",
        "alias expansion (10^9 values)": HEAD + laughs,
        "nested range(100000) loops": HEAD + 'experiments:\n  - name: a\n    command: "echo '
        '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"\n',
        "10 ** 3000000000": HEAD
        + "experiments:\n  - {name: a, command: 'echo {{ 10 ** 3000000000 }}'}\n",
        "cpus 0-4000000000": HEAD + "experiments:\n  - {name: a, command: 'true', "
        "cpus: '0-4000000000'}\n",
        "49,000-point sweep (accepted)": HEAD + "experiments:\n  - name: a\n    command: "
        "'echo {{ x }} {{ y }}'\n    sweep:\n      matrix:\n        x: ["
        + ", ".join(map(str, range(490)))
        + "]\n        y: ["
        + ", ".join(map(str, range(100)))
        + "]\n",
    }


def main() -> None:
    from socketlab.errors import SocketlabError
    from socketlab.spec.expand import expand_points
    from socketlab.spec.load import load_spec
    from tests.test_hardening_fuzz import _host_facts

    facts = _host_facts()
    print(
        f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}"
    )
    print("| case | file size | seconds | outcome |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in cases().items():
            path = Path(tmp) / "spec.yaml"
            path.write_text(text)
            t0 = time.perf_counter()
            try:
                plan = expand_points(load_spec(path), facts)
                outcome = f"{len(plan.points)} points"
            except SocketlabError as exc:
                outcome = "refused: " + str(exc).split(": ", 2)[-1][:70]
            seconds = time.perf_counter() - t0
            print(f"| {name} | {len(text) / 1e6:.2f} MB | {seconds:.2f} | {outcome} |")


if __name__ == "__main__":
    main()
