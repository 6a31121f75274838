"""The old name of socketlab.report.stage_plan, kept while tests/test_stage_plan_report.py and
docs/planner.md (being edited elsewhere) still name it; import socketlab.report.stage_plan."""

from socketlab.report.stage_plan import Verdict, planner_markdown, stage_verdicts

__all__ = ["Verdict", "planner_markdown", "stage_verdicts"]
