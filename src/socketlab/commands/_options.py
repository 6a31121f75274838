"""Options that several subcommands take alike (private: cli.py registers no command from _*)."""

from __future__ import annotations

import argparse

from socketlab import paths


def add_inventory_arguments(parser: argparse.ArgumentParser, *, dest: str, limit_help: str) -> None:
    """-i/--inventory and -l/--limit, the same on every command that picks hosts (as
    ansible-playbook spells them); --hosts is the older spelling of -l, kept."""
    parser.add_argument(
        "-i",
        "--inventory",
        metavar="FILE",
        help="Ansible inventory (default: inventory/localhost.yml, this machine)",
    )
    parser.add_argument("-l", "--limit", "--hosts", dest=dest, metavar="PATTERN", help=limit_help)


def add_spec_arguments(
    parser: argparse.ArgumentParser, *, repetitions_help: str, profile_help: str
) -> None:
    """SPEC and how plan and run narrow it: -l, -i, --repetitions, --profile."""
    parser.add_argument(
        "spec",
        help="experiment spec: a YAML file, or the name of a shipped one "
        "(quickstart, campaign-oct, ...: experiments/)",
    )
    add_inventory_arguments(
        parser,
        dest="hosts",
        limit_help="Ansible host pattern to run on instead of the spec's hosts.pattern",
    )
    parser.add_argument("--repetitions", type=int, metavar="N", help=repetitions_help)
    parser.add_argument("--profile", metavar="NAME", help=profile_help)


def add_results_argument(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """--results DIR: the results folder a command reads or writes."""
    parser.add_argument(
        "--results", metavar="DIR", help=help or f"results folder (default {paths.RESULTS})"
    )


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    """Which inventory hosts, how their isolation is planned, --timeout and --json: the options
    `hosts` and `cpuset` share (both gather facts through socketlab.facts.gather_all)."""
    add_inventory_arguments(parser, dest="limit", limit_help="Ansible host pattern")
    parser.add_argument(
        "--housekeeping",
        type=int,
        default=2,
        metavar="H",
        help="housekeeping physical cores per NUMA node (default 2)",
    )
    parser.add_argument(
        "--prefer-irq-cores",
        action="store_true",
        help="pick housekeeping cores that already serve the node's device IRQs",
    )
    parser.add_argument("--timeout", type=float, default=60, help="seconds per host (default 60)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
