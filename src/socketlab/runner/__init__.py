"""Run points on hosts (socketlab.runner.supervisor until the runner is split)."""

from socketlab.runner.supervisor import Runner, Summary, combined_profile, point_label

__all__ = ["Runner", "Summary", "combined_profile", "point_label"]
