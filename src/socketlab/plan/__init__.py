"""The stage planner (pure): the decoder's stage model, its constants and the cluster projection
(docs/planner.md). The CPU-set planners are in socketlab.placement, the tailor controller and
its simulator in socketlab.tailor."""
