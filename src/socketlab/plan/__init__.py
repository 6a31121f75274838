"""Pure planning: functions of host facts that decide CPU sets; nothing here touches a host."""

from socketlab.plan.isolation import IsolationPlan, plan_isolation

__all__ = ["IsolationPlan", "plan_isolation"]
