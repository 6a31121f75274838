"""Reports: plain measured tables (tables.py) and the published-vs-measured comparison.

published.py loads published values as data, compare.py gives each published cell a verdict
against the store's medians (pure), render.py writes markdown and standalone HTML with plots,
gather.py gathers a campaign's store, host facts and provenance into a ``render.Report``,
stage_plan.py the stage planner's predictions next to the stages each host measured.
"""
