"""CPU lists and masks in the kernel's formats (socketlab.cpulist)."""

from __future__ import annotations

from pathlib import Path

import pytest

from socketlab.cpulist import CpuListError, cpumask, format_cpulist, parse_cpulist, parse_cpumask
from socketlab.errors import SocketlabError


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("", []),
        ("0", [0]),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("2-31,34-63,66-95", [*range(2, 32), *range(34, 64), *range(66, 96)]),
        (" 5,1-2 \n", [1, 2, 5]),
        ("0-15:2/4", [0, 1, 4, 5, 8, 9, 12, 13]),  # the kernel's used/group stride syntax
        ("3,3,1-3", [1, 2, 3]),
    ],
)
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a", "1-", "3-1", "1,,2", "0-7:0/4", "0-7:5/4", "-1"])
def test_parse_cpulist_rejects_with_the_value_named(text):
    with pytest.raises(CpuListError) as err:
        parse_cpulist(text, "nodes.0.cpulist")
    assert "nodes.0.cpulist" in str(err.value)
    assert isinstance(err.value, SocketlabError)


def test_format_cpulist_uses_ranges_like_the_kernel():
    assert format_cpulist([]) == ""
    assert format_cpulist([0, 1]) == "0-1"  # the kernel prints a run of two as a range
    assert format_cpulist([5, 1, 2, 3, 9]) == "1-3,5,9"
    assert format_cpulist(range(96, 128)) == "96-127"


def test_format_parse_round_trip():
    cpus = [0, 1, 2, 7, 9, 10, 11, 64, 191]
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.mark.parametrize(
    ("cpus", "ncpus", "mask"),
    [
        ([0, 1], 2, "3"),  # the width the kernel prints for nr_cpu_ids=2 (this VM reads "3")
        ([0, 1], 40, "00,00000003"),
        ([0, 1, 32, 33], 64, "00000003,00000003"),
        ([], 32, "00000000"),
        ([31], 32, "80000000"),
        ([0, 2], 4, "5"),
        ([0, 1, 32, 33, 64, 65, 96, 97, 128, 129, 160, 161], 192, ",".join(["00000003"] * 6)),
    ],
)
def test_cpumask_matches_kernel_format(cpus, ncpus, mask):
    assert cpumask(cpus, ncpus) == mask
    assert parse_cpumask(mask) == sorted(cpus)


def test_cpumask_rejects_cpus_outside_the_mask():
    with pytest.raises(CpuListError, match="outside 0-1"):
        cpumask([2], 2)
    with pytest.raises(CpuListError):
        cpumask([0], 0)


@pytest.mark.parametrize("text", ["", "xyz", "3,,1", "123456789"])
def test_parse_cpumask_rejects(text):
    with pytest.raises(CpuListError):
        parse_cpumask(text)


def test_this_machines_workqueue_mask_reads_back_in_our_format():
    # What the kernel prints for "all online CPUs" must equal what we would write for them.
    wq = Path("/sys/devices/virtual/workqueue/cpumask")
    possible = Path("/sys/devices/system/cpu/possible")
    if not wq.exists() or not possible.exists():
        pytest.skip("no workqueue cpumask on this kernel")
    ncpus = max(parse_cpulist(possible.read_text())) + 1
    text = wq.read_text().strip()
    assert cpumask(parse_cpumask(text), ncpus) == text
