"""`orchestrate hosts`' "isolated now" row, from the facts it gathers (pure: no knob changes).

The real flow (isolate.yml, verify.yml, then `orchestrate hosts` says isolated and verified; not
isolated before) runs in tests/test_site_pristine_e2e.py; this covers the other branches."""

from __future__ import annotations

import copy

import pytest

from socketlab.placement.isolation import plan_isolation
from socketlab.report.hosts import isolation_now
from socketlab.topology import host_facts_module, topology_from_snapshot


@pytest.fixture(scope="module")
def facts():
    snap = host_facts_module().snapshot("/", state_dir="/nonexistent-socketlab-state")
    topology = topology_from_snapshot(snap)
    plan = plan_isolation(topology, 1).facts()
    return {"snapshot": snap, "topology": topology.facts()}, plan


def _with(facts, mask=None, record=None):
    out = copy.deepcopy(facts)
    if mask is not None:
        out["topology"]["workqueue_cpumask"] = mask
    if record is not None:
        out["snapshot"]["isolation_verify"] = {"h": record}
    return out


def test_no_record_and_every_cpu_in_the_mask_is_not_isolated(facts):
    f, plan = facts
    everyone = format(2 ** plan["ncpus"] - 1, "x")
    assert isolation_now("h", _with(f, mask=everyone), plan) == {
        "isolated": False,
        "verified": False,
        "text": "not isolated",
    }


def test_the_plans_mask_without_a_record_is_isolated_but_not_verified(facts):
    f, plan = facts
    now = isolation_now("h", _with(f, mask=plan["workqueue_mask"]), plan)
    assert now["isolated"] and not now["verified"]
    assert now["text"] == (
        "isolated: the workqueue mask is the plan's; not verified (run playbooks/verify.yml)"
    )


def test_a_record_of_another_host_is_not_this_ones(facts):
    f, plan = facts
    record = {"passed": True, "plan": plan, "time": "2026-01-01T00:00:00Z", "drifted": []}
    other = _with(f, mask="ff")
    other["snapshot"]["isolation_verify"] = {"other": record}
    assert isolation_now("h", other, plan)["text"] == "not isolated"


def test_a_record_whose_plan_no_longer_runs_says_so(facts):
    f, plan = facts
    record = {"passed": True, "plan": plan, "time": "2026-01-01T00:00:00Z", "drifted": []}
    everyone = format(2 ** plan["ncpus"] - 1, "x")
    now = isolation_now("h", _with(f, mask=everyone, record=record), plan)
    assert not now["isolated"] and not now["verified"]
    assert now["text"].startswith(
        "not isolated (the workqueue mask is not the plan's); verified 2026-01-01T00:00:00Z"
    )


def test_a_failed_verify_is_isolated_and_names_the_drift(facts):
    f, plan = facts
    record = {
        "passed": False,
        "plan": plan,
        "time": "2026-01-01T00:00:00Z",
        "drifted": ["THP: expected madvise, found always"],
    }
    now = isolation_now("h", _with(f, mask=plan["workqueue_mask"], record=record), None)
    assert now["isolated"] and not now["verified"]
    assert now["text"] == (
        f"isolated: isolate.yml's plan (housekeeping {plan['housekeeping_list']}, workers "
        f"{plan['workers_list']}); verify failed: THP: expected madvise, found always "
        "(2026-01-01T00:00:00Z)"
    )
