"""Per-request raw timestamps: the one record every serving metric is computed from.

Times are integer nanoseconds of ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux, so a
server process on the same host can be compared against it), relative to the run's origin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    index: int  #: order of dispatch within the run (warm-up requests first)
    #: "warmup" (never measured), "measured", or "cooldown" (an imported tool's cool-down)
    phase: str
    prompt_id: str = ""
    n_in: int | None = None  #: prompt tokens (server usage, else the prompt source's count)
    t_sched: int | None = None  #: intended dispatch (open loop) / worker free (closed loop)
    t_send: int | None = None  #: just before the request is written
    t_first_byte: int | None = None  #: first SSE data event of any kind (diagnosis only)
    #: output-bearing events: [t_ns, tokens in this event]
    events: list[list[int]] = field(default_factory=list)
    t_done: int | None = None  #: "[DONE]" or end of stream
    n_out: int | None = None  #: output tokens (usage when the server reports it, else sum)
    n_out_source: str = "events"  #: "usage" or "events"
    status: str = "pending"  #: ok / error / incomplete
    error: str | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    #: server-side send times of the events, when the endpoint stamps them (``x_ts_ns``, our
    #: scripted test endpoint) - absolute perf_counter_ns, for measuring timestamp error
    server_ts_ns: list[int] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def t_first(self) -> int | None:
        return self.events[0][0] if self.events else None

    @property
    def t_end(self) -> int | None:
        return self.events[-1][0] if self.events else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["t_first"] = self.t_first
        d["t_end"] = self.t_end
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestRecord:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})
