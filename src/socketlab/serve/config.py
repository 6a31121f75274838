"""The `serving:` block of a spec, parsed into frozen settings (pure).

The JSON schema (``$defs/serving`` in schemas/spec.schema.json) checks types; this adds the
checks a schema cannot make (unique arm names, a known baseline) and the defaults. The resolved
settings travel in ``RunPoint.extra["serving"]`` as plain JSON (``as_json``/``from_json``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from socketlab.errors import SpecError
from socketlab.serve.metrics import Slo


@dataclass(frozen=True)
class Arm:
    name: str
    command: tuple[str, ...]  #: argv templates; "{port}" is filled at run time
    env: dict[str, str] = field(default_factory=dict)
    placement: str = "all"
    cpus: str | None = None  #: explicit server CPU list template (overrides placement)
    client_cpus: str | None = None
    ready_path: str | None = None


@dataclass(frozen=True)
class Level:
    concurrency: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        return f"c{self.concurrency}" if self.concurrency else f"r{self.rate:g}"

    def dims(self) -> dict[str, Any]:
        d: dict[str, Any] = {"load": self.label}
        if self.concurrency:
            d["concurrency"] = self.concurrency
        else:
            d["rate"] = self.rate
        return d


@dataclass(frozen=True)
class ServingConfig:
    arms: tuple[Arm, ...]
    levels: tuple[Level, ...]
    model: str | None = None
    base_url: str = "http://{address}:{port}"  #: {address}: the host's (127.0.0.1 locally)
    endpoint: str = "/v1/completions"
    ready_path: str = "/v1/models"
    ready_timeout_s: float = 120.0
    request_timeout_s: float = 300.0
    baseline: str = ""
    burstiness: float = 1.0
    max_concurrency: int | None = None
    input_tokens: int = 128
    output_tokens: int = 128
    prompts: str = "corpus"
    requests: int = 16
    warmup_requests: int = 2
    slo: Slo = field(default_factory=Slo)
    request: dict[str, Any] = field(default_factory=dict)
    sample_interval_ms: float = 100.0

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServingConfig:
        d = dict(d)
        d["arms"] = tuple(Arm(**{**a, "command": tuple(a["command"])}) for a in d["arms"])
        d["levels"] = tuple(Level(**lv) for lv in d["levels"])
        d["slo"] = Slo(**d.get("slo") or {})
        return cls(**d)


def _argv(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        from socketlab.spec.load import split_command  # keeps {{ ... }} in one word

        return tuple(split_command(value))
    return tuple(str(v) for v in value)


def parse(block: dict[str, Any], where: Callable[[str], str], base: str) -> ServingConfig:
    """Settings from a schema-valid block; ``where(path)`` gives "FILE:LINE: path" for errors,
    ``base`` is the block's field path (``experiments[2].serving``)."""
    arms = []
    seen: dict[str, int] = {}
    for j, a in enumerate(block["arms"]):
        name = a["name"]
        if name in seen:
            raise SpecError(
                f"{where(f'{base}.arms[{j}].name')}: duplicate arm name {name!r} "
                f"(also arms[{seen[name]}])"
            )
        seen[name] = j
        command = _argv(a["command"])
        if not command or not command[0]:
            raise SpecError(f"{where(f'{base}.arms[{j}].command')}: empty server command")
        arms.append(
            Arm(
                name,
                command,
                {k: str(v) for k, v in (a.get("env") or {}).items()},
                a.get("placement", "all"),
                a.get("cpus"),
                a.get("client_cpus"),
                a.get("ready_path"),
            )
        )
    load = block["load"]
    levels = [Level(concurrency=int(c)) for c in load.get("concurrency", ())]
    levels += [Level(rate=float(r)) for r in load.get("rates", ())]
    if not levels:
        raise SpecError(
            f"{where(f'{base}.load')}: no load level; expected concurrency: [1, 8] "
            "and/or rates: [0.5, 2]"
        )
    baseline = block.get("baseline", arms[0].name)
    if baseline not in seen:
        import difflib

        close = difflib.get_close_matches(baseline, list(seen), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise SpecError(
            f"{where(f'{base}.baseline')}: {baseline!r} is not an arm{hint}; "
            f"arms: {', '.join(seen)}"
        )
    _check_requests(block, where, base)
    slo = block.get("slo") or {}
    return ServingConfig(
        arms=tuple(arms),
        levels=tuple(levels),
        model=block.get("model"),
        base_url=block.get("base_url", ServingConfig.base_url),
        endpoint=block.get("endpoint", ServingConfig.endpoint),
        ready_path=block.get("ready_path", ServingConfig.ready_path),
        ready_timeout_s=float(block.get("ready_timeout_s", ServingConfig.ready_timeout_s)),
        request_timeout_s=float(block.get("request_timeout_s", ServingConfig.request_timeout_s)),
        baseline=baseline,
        burstiness=float(load.get("burstiness", 1.0)),
        max_concurrency=load.get("max_concurrency"),
        input_tokens=int(block.get("input_tokens", ServingConfig.input_tokens)),
        output_tokens=int(block.get("output_tokens", ServingConfig.output_tokens)),
        prompts=block.get("prompts", "corpus"),
        requests=int(block.get("requests", ServingConfig.requests)),
        warmup_requests=int(block.get("warmup_requests", ServingConfig.warmup_requests)),
        slo=Slo(slo.get("ttft_ms"), slo.get("tpot_ms"), slo.get("e2el_ms")),
        request=_with_suppressed(
            dict(block.get("request") or {}),
            block.get("suppress_token_ids"),
            lambda: where(f"{base}.suppress_token_ids"),
        ),
        sample_interval_ms=float(block.get("sample_interval_ms", 100.0)),
    )


def _check_requests(block: dict[str, Any], where: Callable[[str], str], base: str) -> None:
    """requests and warmup_requests within REQUESTS: each prompt is made before its level runs,
    so an extra zero must be refused at plan time, not fill memory at run time."""
    from socketlab.limits import limit, over

    for key in ("requests", "warmup_requests"):
        value = block.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > limit("REQUESTS"):
            shown = (
                str(value)
                if len(str(value)) <= 20
                else f"{str(value)[:6]}... ({len(str(value))} digits)"
            )
            raise SpecError(f"{where(f'{base}.{key}')}: {key} {over('REQUESTS', shown)}")


def _with_suppressed(
    request: dict[str, Any], ids: str | None, where: Callable[[], str]
) -> dict[str, Any]:
    """Merge logit_bias -100 for each id of "2-258,300" into the request body."""
    if not ids:
        return request
    from socketlab.limits import limit, over

    def tid(digits: str) -> int:  # 5,000 digits: too many ids, not a ValueError from int()
        digits = digits.strip().lstrip("0") or "0"
        return int(digits) if len(digits) <= 18 else 10**18

    ranges = [
        (tid(lo), tid(hi or lo))
        for lo, _, hi in (part.strip().partition("-") for part in ids.split(","))
    ]
    count = sum(hi - lo + 1 for lo, hi in ranges if hi >= lo)
    if count > limit("TOKEN_IDS"):  # counted before a dict of 4 billion keys is made
        raise SpecError(f"{where()}: {over('TOKEN_IDS', count, 'token ids')}")
    bias = dict(request.get("logit_bias") or {})
    for lo, hi in ranges:
        for i in range(lo, hi + 1):
            bias.setdefault(str(i), -100)
    return {**request, "logit_bias": bias}
