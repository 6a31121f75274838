"""Cross-checks of our serving metrics against an independent client (guidellm).

Two checks, as tests/test_serve_peer_guidellm.py runs them:
- ``definition_gaps``: our per-request definitions applied to guidellm's own timestamps
  (imported by socketlab.serve.guidellm_import) against the values guidellm computed from the
  same timestamps. Both read one clock reading per event, so only float rounding separates
  them (guidellm keeps wall-clock seconds as floats: ~1e-7 s); a changed definition (TPOT over
  N instead of N - 1, TTFT from the schedule, tokens counted wrong) moves them by percent.
- ``relative_gaps``: the medians two clients measured on the same server, interleaved. They
  differ by client overhead and run-to-run noise, so the tolerance there is measured
  (docs/serving.md) and only a gross change (TPOT folding TTFT in) shows.
"""

from __future__ import annotations

from typing import Any

from socketlab.serve import metrics as metrics_mod
from socketlab.serve.records import RequestRecord

MS = 1e6


def definition_gaps(
    records: list[RequestRecord], guidellm_requests: list[dict[str, Any]]
) -> dict[str, float]:
    """Largest relative difference per metric between our per-request values on guidellm's
    timestamps and guidellm's own per-request fields (successful requests, same order)."""
    ok = [r for r in records if r.ok]
    if len(ok) != len(guidellm_requests):
        raise ValueError(f"{len(ok)} successful records for {len(guidellm_requests)} requests")
    pairs = {"ttft": "time_to_first_token_ms", "tpot": "inter_token_latency_ms"}
    out = {k: 0.0 for k in pairs}
    for rec, theirs in zip(ok, guidellm_requests, strict=True):
        lat = metrics_mod.per_request(rec)
        for ours, field in pairs.items():
            mine, other = lat[ours], theirs.get(field)
            if mine is None or other is None:
                if (mine is None) != (other is None):
                    out[ours] = float("inf")
                continue
            out[ours] = max(out[ours], abs(mine / MS - other) / abs(other))
    return out


def relative_gaps(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, float]:
    """|ours / theirs - 1| per metric both hold."""
    return {k: abs(ours[k] / theirs[k] - 1) for k in ours if k in theirs and theirs[k]}
