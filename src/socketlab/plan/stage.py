"""The stage planner's cost model and packer (pure): which weights each socket holds, and how
long each stage takes (docs/planner.md).

A decoder is a list of `Unit`s in execution order (`socketlab.plan.stage_model` builds it from a
model file or a Hugging Face config.json). A stage is one socket, or a group of sockets working
on the same microbatch (a tensor-parallel layer, an expert group, the vocab-parallel LM head; with
`split="pipe"` the LM head's rows are packed like any other unit, one pipeline stage a socket).

Time per stage, each term kept apart so a prediction can be checked term by term:

    gemv      = weight bytes per core / GEMV rate per core   (the tier the slice lives in)
    sync      = exchanges x exchange cost                     (all-core barrier + broadcast)
    kv        = KV bytes read per step / KV rate              (B sequences, window or context;
                the rate of the attention's class: head_dim, GQA group, batch, KV bytes)
    act       = (B - 1) x activation bytes each core gathers per row / all-gather rate
    allreduce = cross-socket all-reduces x all-reduce cost    (tensor parallelism, LM head;
                with a link: latency + ring bytes / link rate, see `Link`)
    elem      = B x (vector elements per core x elem cost + gelu elements per core x gelu cost)
                (norms, RoPE, residual adds, the combine, the activations: the non-GEMV work)

Packing: units go into sockets in order under `cores x budget` bytes; a splittable unit (FFN
rows; the PLE projection; the LM head) fills the open socket down to `min_rows_per_core x
cores` rows, an indivisible one (attention, the PLE block) that does not fit opens a new one.
With `split="tp"` a layer larger than a socket becomes a tensor-parallel group of the smallest
socket count that divides its heads and FFN rows and fits; MoE experts take whole sockets of
their own (L2 only, or L2 + L3 with `expert_tier="l3"`); the tied LM head is vocab-parallel.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from socketlab.errors import PlanError

KINDS = ("ple_proj", "attn", "ffn", "ple", "router", "experts", "head")
SPLITS = ("tp", "pipe")
TIERS = ("l2", "l3")
TERMS = ("gemv_us", "sync_us", "kv_us", "act_us", "allreduce_us", "elem_us")


@dataclass(frozen=True)
class Unit:
    """One piece of the decoder in execution order. Sizes in bytes (BF16 weights)."""

    kind: str
    layer: int | None
    rows: int = 0  #: output rows it may be split along (0: indivisible; experts: the count)
    row_bytes: int = 0
    fixed_bytes: int = 0  #: bytes not split with the rows (norms; all of an indivisible unit)
    exchanges: int = 0  #: all-core exchanges inside the unit
    kv_row_bytes: int = 0  #: KV bytes read per sequence per attended token (attention only)
    window: int | None = None  #: attention window in tokens (None: the whole context)
    kv_source: int | None = None  #: KV-shared layer: the layer whose cache it reads
    act_fixed: int = 0  #: activation bytes every core gathers per batch row ...
    act_per_row: int = 0  #: ... per split row (FFN: the gelu(gate)*up element)
    act_split: int = 0  #: ... divided by the TP degree (attention: q and its output)
    heads: int = 0
    kv_heads: int = 0
    kv_weight_bytes: int = 0  #: the k/v/k_norm bytes inside fixed_bytes
    act_out: int = 0  #: the part of act_fixed that is the layer's output (a pipeline stage
    #: gathers it; the single-layer stage that native/layer runs does not)
    top_k: int = 0  #: experts: experts chosen per token
    # non-GEMV element work per batch row (the elem term; 0 where not modelled: router, experts,
    # head): norms, residual adds and bf16 casts every core does on the whole vector ...
    elem_fixed: int = 0
    elem_heads: int = 0  #: ... per-head q/k/v norms and RoPE (split with the heads under TP)
    elem_split: int = 0  #: ... work split over the cores (the attention combine)
    gelu_split: int = 0  #: gelu'd elements split over the cores, not with the rows (PLE gate)
    gelu_per_row: int = 0  #: gelu'd elements per split row (FFN: gelu(gate) x up)
    head_dim: int = 0  #: attention: the KV heads' width (picks the KV rate's class)
    out_bytes: int = 0  #: the residual vector a batch row carries out of the unit (FP32 hidden:
    #: what a pipeline hop sends and a tensor-parallel all-reduce sums)

    @property
    def bytes(self) -> int:
        return self.fixed_bytes + self.rows * self.row_bytes


@dataclass(frozen=True)
class Budget:
    cores: int = 90
    bytes_per_core: int = 1344 * 1024  #: L2 weight bytes per core (12 lock ways: 1,344 KiB)
    l2_bytes_per_core: int = 2 * 1024 * 1024  #: the whole L2 per core (Granite Rapids: 2 MiB)
    batch: int = 1
    context: int = 2048
    min_rows_per_core: int = 16  #: smallest split piece per core (an AMX tile)
    split: str = "tp"
    expert_tier: str = "l2"  #: l2: experts in L2 only; l3: L2 + the L3 share of each core
    l3_bytes_per_core: int = 0  #: the L3 bytes per core experts may also use (expert_tier l3)

    @property
    def cap(self) -> int:
        return self.cores * self.bytes_per_core


@dataclass(frozen=True)
class KvRate:
    """The attention rate of one shape class, measured (`layer --slice --ctx N` of a dump of
    that class at two contexts): KV GB/s at `batch` sequences, around `kv_bytes` per step."""

    head_dim: int
    group: int  #: q heads per KV head (GQA)
    batch: int
    kv_bytes: float  #: per step (geometric mean of the two contexts' KV bytes)
    gbps: float
    #: cold points: the bytes of the rotated KV copies read between two reads of the same KV
    #: (native/layer --kv-cold-mib), so each step finds its KV evicted; 0: warm (one copy, the
    #: KV alone, left where the last step put it)
    footprint: float = 0.0

    @property
    def cold(self) -> bool:
        return self.footprint > 0


@dataclass(frozen=True)
class Link:
    """A socket-to-socket link: a message of N bytes costs latency_us + N / gbps."""

    latency_us: float
    gbps: float

    def us(self, nbytes: float, messages: int = 1) -> float:
        return messages * self.latency_us + nbytes / (self.gbps * 1e3)

    def hop_us(self, row_bytes: int, batch: int) -> float:
        """One pipeline hop: the stage's output vectors, B rows."""
        return self.us(batch * row_bytes)

    def allreduce_us(self, row_bytes: int, batch: int, sockets: int) -> float:
        """One all-reduce of B rows over S sockets: each socket sends 2 (S - 1) / S of the
        bytes, as a ring does (31B TP8 at B=16: 2 x 7/8 x 16 x 5,376 x 4 B = 588 KiB, the seed's
        figure), with one latency (the seed's fixed 10 µs was one cost, not 2 (S - 1) steps)."""
        if sockets < 2:
            return 0.0
        return self.us(2 * (sockets - 1) / sockets * batch * row_bytes)


def _dist(a: float, b: float) -> float:
    return abs(math.log2(max(a, 1e-9) / max(b, 1e-9)))


@dataclass(frozen=True)
class Constants:
    """The cost model's inputs. `provenance` says where each value came from (run keys, a file)."""

    gemv_gbps_per_core: float  #: GEMV weight GB/s per core from L2
    exchange_us: float  #: one all-core exchange (barrier + broadcast)
    kv_gbps: float  #: KV stream GB/s (socket)
    act_gbps: float  #: per-core all-gather GB/s of one batch row's activations
    hop_us: float = 5.0  #: one pipeline hop between sockets (assumed, not measured)
    allreduce_us: float = 10.0  #: one cross-socket all-reduce (assumed, not measured)
    elem_ns: float = 0.0  #: one vector element of a norm / RoPE / residual / combine (0: absent)
    gelu_ns: float = 0.0  #: one gelu'd activation element (0: absent)
    gemv_l3_gbps_per_core: float | None = None  #: GEMV from L3 (experts in L2 + L3)
    #: per attention class (head_dim, group, batch, KV bytes); empty: kv_gbps for every shape
    kv_classes: tuple[KvRate, ...] = ()
    link: Link | None = None  #: hop and all-reduce as bytes over it (None: hop_us, allreduce_us)
    host: str = ""
    kernel: str = ""
    provenance: dict[str, str] = field(default_factory=dict)

    def replace(self, **kw) -> Constants:
        return dataclasses.replace(self, **kw)

    def kv_rate(
        self,
        head_dim: int,
        group: int,
        batch: int,
        kv_bytes: float,
        cold: bool = False,
    ) -> tuple[float, KvRate | None]:
        """The KV GB/s of an attention of `head_dim` x `group` at `batch`, `kv_bytes` per step,
        its KV evicted between steps or not (`cold`, `kv_evicted`): the nearest measured class
        (log2 distance in head_dim + in group; exact where measured), its nearest batch, its
        cold (rotated) points for a cold stage and warm ones for a warm stage where the class
        has both, then the point nearest in KV bytes; kv_gbps where no class is measured (or
        the unit has no head_dim)."""
        if not self.kv_classes or not head_dim:
            return self.kv_gbps, None
        near = min(_dist(k.head_dim, head_dim) + _dist(k.group, group) for k in self.kv_classes)
        cls = [
            k
            for k in self.kv_classes
            if _dist(k.head_dim, head_dim) + _dist(k.group, group) == near
        ]
        cls = [k for k in cls if (k.head_dim, k.group) == (cls[0].head_dim, cls[0].group)]
        nb = min(_dist(k.batch, batch) for k in cls)
        cls = [k for k in cls if _dist(k.batch, batch) == nb]
        cls = [k for k in cls if k.cold == cold] or cls
        best = min(cls, key=lambda k: _dist(k.kv_bytes, max(kv_bytes, 1.0)))
        return best.gbps, best


@dataclass(frozen=True)
class Piece:
    unit: int
    kind: str
    layer: int | None
    row0: int
    row1: int
    of_rows: int
    bytes: int

    @property
    def label(self) -> str:
        name = (f"L{self.layer}." if self.layer is not None else "") + self.kind
        if self.of_rows and (self.row0, self.row1) != (0, self.of_rows):
            name += f"[{self.row0}:{self.row1}]"
        return name


@dataclass(frozen=True)
class Load:
    """What one socket of a stage holds and moves per step (before the time model)."""

    bytes: int = 0
    exchanges: int = 0
    allreduces: int = 0
    kv_bytes: int = 0
    act_bytes: int = 0  #: gathered per core per batch row
    tier: str = "l2"
    elems: float = 0.0  #: vector elements per core per batch row (norms, RoPE, combine)
    gelus: float = 0.0  #: gelu'd elements per core per batch row
    #: the KV bytes by attention class: (head_dim, group, bytes) per attention unit
    kv_parts: tuple[tuple[int, int, int], ...] = ()
    out_bytes: int = 0  #: per batch row: the vector a hop sends / an all-reduce sums
    sockets: int = 1  #: sockets of the stage's all-reduces (a TP group, the LM head's slices)


@dataclass(frozen=True)
class Prediction:
    gemv_us: float
    sync_us: float
    kv_us: float
    act_us: float
    allreduce_us: float
    elem_us: float = 0.0

    @property
    def total_us(self) -> float:
        return (
            self.gemv_us
            + self.sync_us
            + self.kv_us
            + self.act_us
            + self.allreduce_us
            + self.elem_us
        )

    @property
    def onsocket_us(self) -> float:
        return self.total_us - self.allreduce_us

    def terms(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS} | {"total_us": self.total_us}


@dataclass(frozen=True)
class Stage:
    index: int
    label: str
    pieces: tuple[Piece, ...]
    sockets: int
    load: Load
    bytes_per_core: int
    fill: float
    kv_replicas_of: tuple[int, ...]
    pred: Prediction


@dataclass(frozen=True)
class Summary:
    stages: int
    sockets: int
    layers: int
    layers_per_stage: float
    weight_bytes: int
    bottleneck_us: float
    bottleneck_stage: str
    token_latency_us: float
    tokens_per_s: float  #: one microbatch of B sequences in every stage
    sequences_in_flight: int


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]
    summary: Summary
    budget: Budget
    constants: Constants


def predict(load: Load, budget: Budget, c: Constants) -> tuple[int, Prediction]:
    """The time model: bytes per core of one socket of the stage, and the terms."""
    bpc = -(-load.bytes // budget.cores)
    rate = c.gemv_gbps_per_core
    if load.tier == "l3":
        rate = c.gemv_l3_gbps_per_core or rate
    kv_us = load.kv_bytes / (c.kv_gbps * 1e3)
    if load.kv_parts and c.kv_classes:
        # each attention at its class's rate; KV bytes of units without a class at kv_gbps
        classed = sum(b for _, _, b in load.kv_parts)
        cold = kv_evicted(load, budget)
        kv_us = max(load.kv_bytes - classed, 0) / (c.kv_gbps * 1e3) + sum(
            b / (c.kv_rate(hd, g, budget.batch, b, cold)[0] * 1e3) for hd, g, b in load.kv_parts
        )
    return bpc, Prediction(
        gemv_us=bpc / (rate * 1e3),
        sync_us=load.exchanges * c.exchange_us,
        kv_us=kv_us,
        act_us=max(budget.batch - 1, 0) * load.act_bytes / (c.act_gbps * 1e3),
        allreduce_us=load.allreduces
        * allreduce_cost(c, load.out_bytes, budget.batch, load.sockets),
        elem_us=budget.batch * (load.elems * c.elem_ns + load.gelus * c.gelu_ns) / 1e3,
    )


def kv_evicted(load: Load, budget: Budget) -> bool:
    """Whether a stage finds its KV evicted at every step: its weights per core overflow the
    L2. Weights that fit the L2 stay there and leave the KV where the last step put it (warm);
    weights that don't stream through the L3 every step and push the KV out to DRAM. Measured
    on one core of the Granite Rapids guest: E2B L0 2K (73 MB of weights) reads its 8 MiB of KV
    at B=16 at 1.55 GB/s, as the (256, 8) class dump rotated over 64 MiB of copies does (1.4),
    not at the 3.9 of the same dump warm; tiny (1.7 MB of weights, inside the 2 MiB L2) reads
    its KV at the warm rate."""
    return -(-load.bytes // max(budget.cores, 1)) > budget.l2_bytes_per_core


def allreduce_cost(c: Constants, row_bytes: int, batch: int, sockets: int) -> float:
    """One cross-socket all-reduce: bytes over the link where the constants have one (a ring
    over the stage's sockets), else the fixed allreduce_us."""
    if c.link is not None:
        return c.link.allreduce_us(row_bytes, batch, max(sockets, 2))
    return c.allreduce_us


def hop_cost(c: Constants, row_bytes: int, batch: int) -> float:
    """One pipeline hop: bytes over the link where the constants have one, else hop_us."""
    if c.link is not None:
        return c.link.hop_us(row_bytes, batch)
    return c.hop_us


def _group(u: Unit, kv_heads: int | None = None, heads: int | None = None) -> int:
    kvh = u.kv_heads if kv_heads is None else kv_heads
    return max((u.heads if heads is None else heads) // max(kvh, 1), 1)


def stage_load(units: list[Unit], pieces: list[Piece], budget: Budget) -> Load:
    """A single socket holding whole units and row pieces."""
    nbytes = exchanges = kv = act = out = 0
    elems = gelus = 0.0
    parts: list[tuple[int, int, int]] = []
    for p in pieces:
        u = units[p.unit]
        nbytes += p.bytes
        exchanges += u.exchanges
        act += u.act_fixed + u.act_split + u.act_per_row * (p.row1 - p.row0 if u.rows else 0)
        kv += _kv(u, budget, u.kv_row_bytes)
        out = max(out, u.out_bytes)
        if u.head_dim and u.kv_row_bytes:
            parts.append((u.head_dim, _group(u), _kv(u, budget, u.kv_row_bytes)))
        elems += u.elem_fixed + u.elem_heads + u.elem_split / budget.cores
        gelus += (u.gelu_split + u.gelu_per_row * (p.row1 - p.row0 if u.rows else 0)) / budget.cores
    return Load(
        bytes=nbytes,
        exchanges=exchanges,
        kv_bytes=kv,
        act_bytes=act,
        elems=elems,
        gelus=gelus,
        kv_parts=tuple(parts),
        out_bytes=out,
    )


def _kv(u: Unit, budget: Budget, row_bytes: int) -> int:
    rows = budget.context if u.window is None else min(u.window, budget.context)
    return row_bytes * rows * budget.batch


def _replicas(units: list[Unit], pieces: list[Piece]) -> tuple[int, ...]:
    """KV-shared layers in the stage whose source layer's attention is elsewhere."""
    here = {units[p.unit].layer for p in pieces if units[p.unit].kind == "attn"}
    out: list[int] = []
    for p in pieces:
        s = units[p.unit].kv_source
        if s is not None and s not in here and s not in out:
            out.append(s)
    return tuple(out)


def tp_load(units: list[Unit], idx: list[int], s: int, budget: Budget) -> Load | None:
    """One socket's share of dense units split S ways, or None where S does not divide them:
    whole q heads with their KV heads (a KV head replicated when S exceeds the KV heads), a
    block of FFN rows (a multiple of the tile rows), everything else whole on every socket."""
    nbytes = exchanges = kv = act = out = 0
    elems = gelus = 0.0
    parts: list[tuple[int, int, int]] = []
    for i in idx:
        u = units[i]
        exchanges += u.exchanges
        act += u.act_fixed
        out = max(out, u.out_bytes)
        # attention's heads and the FFN's rows split S ways; everything else whole on each
        k = s if u.kind in ("attn", "ffn") else 1
        elems += u.elem_fixed + (u.elem_heads + u.elem_split / budget.cores) / k
        gelus += (u.gelu_split + u.gelu_per_row * u.rows) / k / budget.cores
        if u.kind == "attn":
            if u.heads % s or (u.kv_heads and u.kv_heads % s and s % u.kv_heads):
                return None
            kvh = u.kv_heads // s if u.kv_heads >= s else 1

            def share(x: int, u: Unit = u, kvh: int = kvh) -> int:
                return x * kvh // u.kv_heads if u.kv_heads else 0

            nbytes += (u.fixed_bytes - u.kv_weight_bytes) // s + share(u.kv_weight_bytes)
            kv += _kv(u, budget, share(u.kv_row_bytes))
            if u.head_dim and u.kv_row_bytes:  # a socket's q heads over its KV heads
                parts.append(
                    (
                        u.head_dim,
                        _group(u, kvh, u.heads // s),
                        _kv(u, budget, share(u.kv_row_bytes)),
                    )
                )
            act += u.act_split // s
        elif u.kind == "ffn":
            if u.rows % (s * budget.min_rows_per_core):
                return None
            nbytes += u.fixed_bytes + u.rows // s * u.row_bytes
            act += u.act_per_row * u.rows // s
        else:
            nbytes += u.bytes
            act += u.act_split + u.act_per_row * u.rows
    return Load(
        bytes=nbytes,
        exchanges=exchanges,
        allreduces=2 if s > 1 else 0,
        kv_bytes=kv,
        act_bytes=act,
        elems=elems,
        gelus=gelus,
        kv_parts=tuple(parts),
        out_bytes=out,
        sockets=s,
    )


class _Packer:
    def __init__(self, units: list[Unit], budget: Budget, c: Constants) -> None:
        self.units, self.b, self.c = units, budget, c
        self.cap = budget.cap
        self.stages: list[Stage] = []
        self.open: list[Piece] = []
        self.used = 0

    def _push(
        self,
        label: str,
        pieces: list[Piece],
        sockets: int,
        load: Load,
        replicas: tuple[int, ...] = (),
    ) -> None:
        bpc, pred = predict(load, self.b, self.c)
        cap_per_core = self.b.bytes_per_core
        if load.tier == "l3":
            cap_per_core += self.b.l3_bytes_per_core
        self.stages.append(
            Stage(
                index=len(self.stages),
                label=label,
                pieces=tuple(pieces),
                sockets=sockets,
                load=load,
                bytes_per_core=bpc,
                fill=bpc / cap_per_core,
                kv_replicas_of=replicas,
                pred=pred,
            )
        )

    def flush(self) -> None:
        if self.open:
            pieces, self.open = self.open, []
            name = pieces[0].label + (f" .. {pieces[-1].label}" if len(pieces) > 1 else "")
            self._push(
                name,
                pieces,
                1,
                stage_load(self.units, pieces, self.b),
                _replicas(self.units, pieces),
            )
        self.used = 0

    def _whole(self, i: int) -> Piece:
        u = self.units[i]
        return Piece(i, u.kind, u.layer, 0, u.rows, u.rows, u.bytes)

    def pack(self, i: int) -> None:
        u, b, cap = self.units[i], self.b, self.cap
        if not u.rows:
            if u.bytes > cap:
                raise PlanError(
                    f"{_name(u)}: {u.bytes:,} B does not fit one socket ({b.cores} cores x "
                    f"{b.bytes_per_core // 1024:,} KiB = {cap:,} B); raise --budget-kib or use "
                    f"--split tp"
                )
            if self.used + u.bytes > cap:
                self.flush()
            self.open.append(self._whole(i))
            self.used += u.bytes
            return
        step = b.min_rows_per_core
        least = step * b.cores
        r0 = 0
        while r0 < u.rows:
            fixed = u.fixed_bytes if r0 == 0 else 0
            left = u.rows - r0
            fit = min(max(cap - self.used - fixed, 0) // u.row_bytes, left)
            if fit < left:
                fit = fit // step * step
            if fit < min(least, left):
                if not self.open:
                    raise PlanError(
                        f"{_name(u)}: one socket holds fewer than {least} rows ({step} per core x "
                        f"{b.cores} cores) of {u.row_bytes:,} B: the budget "
                        f"{b.bytes_per_core // 1024:,} KiB per core is smaller than one row unit"
                    )
                self.flush()
                continue
            nbytes = fixed + fit * u.row_bytes
            self.open.append(Piece(i, u.kind, u.layer, r0, r0 + fit, u.rows, nbytes))
            self.used += nbytes
            r0 += fit

    def tp_layer(self, layer: int, idx: list[int]) -> None:
        self.flush()
        dense = [i for i in idx if self.units[i].kind != "experts"]
        heads = max([self.units[i].heads for i in dense] + [1])
        for s in range(1, heads + 1):
            load = tp_load(self.units, dense, s, self.b)
            if load is not None and load.bytes <= self.cap:
                break
        else:
            raise PlanError(
                f"layer {layer}: no tensor-parallel degree up to {heads} fits "
                f"{self.cap:,} B per socket; raise --budget-kib"
            )
        pieces = [self._whole(i) for i in dense]
        self._push(f"L{layer} tp{s}" if s > 1 else f"L{layer}", pieces, s, load)
        for i in idx:
            if self.units[i].kind == "experts":
                self.experts(layer, i)

    def experts(self, layer: int, i: int) -> None:
        """Whole experts per socket, each striped over all cores; a step streams the experts its
        B tokens picked (expected distinct experts under uniform top-k routing)."""
        u, b = self.units[i], self.b
        tier = b.expert_tier
        cap = self.cap + (b.cores * b.l3_bytes_per_core if tier == "l3" else 0)
        per = cap // u.row_bytes
        if per == 0:
            raise PlanError(
                f"layer {layer}: one expert ({u.row_bytes:,} B) does not fit a socket ({cap:,} B)"
            )
        sockets = -(-u.rows // per)
        held = u.rows / sockets
        active = held * (1 - (1 - u.top_k / u.rows) ** b.batch)
        pairs = b.batch * u.top_k / sockets  # (token, expert) pairs per socket per step
        load = Load(
            bytes=int(active * u.row_bytes),
            exchanges=u.exchanges,
            act_bytes=u.act_fixed + int(pairs / max(b.batch, 1) * u.act_per_row),
            tier="l3" if tier == "l3" and held * u.row_bytes > self.cap else "l2",
            out_bytes=u.out_bytes,
        )
        self._push(
            f"L{layer}.experts x{sockets} ({held:.1f} per socket, {active:.1f} active)",
            [self._whole(i)],
            sockets,
            load,
        )

    def head(self, i: int) -> None:
        self.flush()
        u = self.units[i]
        sockets = -(-u.bytes // self.cap)
        load = Load(
            bytes=-(-u.bytes // sockets),
            exchanges=u.exchanges,
            allreduces=1 if sockets > 1 else 0,  # top-k merge over the vocab slices
            # the merge moves a few top-k candidates: the link's latency alone
            act_bytes=u.act_fixed,
            out_bytes=0,
            sockets=sockets,
        )
        self._push(f"head x{sockets}" if sockets > 1 else "head", [self._whole(i)], sockets, load)


def _name(u: Unit) -> str:
    return f"layer {u.layer} {u.kind}" if u.layer is not None else u.kind


def plan(units: list[Unit], budget: Budget, c: Constants) -> Plan:
    """Pack `units` into stages and predict each; PlanError when the budget can't hold them."""
    if budget.split not in SPLITS:
        raise PlanError(f"--split: expected one of {', '.join(SPLITS)}, got {budget.split!r}")
    if budget.batch < 1 or budget.context < 1 or budget.cores < 1:
        raise PlanError("--batch, --context and cores: expected positive integers")
    pk = _Packer(units, budget, c)
    i = 0
    while i < len(units):
        u = units[i]
        if u.kind == "head" and budget.split == "tp":
            pk.head(i)
            i += 1
            continue
        if u.layer is None:
            pk.pack(i)
            i += 1
            continue
        j = i
        while j < len(units) and units[j].layer == u.layer:
            j += 1
        idx = list(range(i, j))
        moe = any(units[k].kind == "experts" for k in idx)
        if budget.split == "tp" and (moe or sum(units[k].bytes for k in idx) > pk.cap):
            pk.tp_layer(u.layer, idx)
        elif moe:
            raise PlanError(f"layer {u.layer}: MoE layers need --split tp")
        else:
            for k in idx:
                pk.pack(k)
        i = j
    pk.flush()
    stages = tuple(pk.stages)
    layers = len({u.layer for u in units if u.layer is not None})
    times = [s.pred.total_us for s in stages]
    hops = [hop_cost(c, s.load.out_bytes, budget.batch) for s in stages]
    bn = max(times, default=0.0)
    return Plan(
        stages=stages,
        summary=Summary(
            stages=len(stages),
            sockets=sum(s.sockets for s in stages),
            layers=layers,
            layers_per_stage=layers / max(len(stages), 1),
            weight_bytes=sum(u.bytes for u in units),
            bottleneck_us=bn,
            bottleneck_stage=stages[times.index(bn)].label if stages else "",
            token_latency_us=sum(times) + sum(hops[:-1]),
            tokens_per_s=budget.batch * 1e6 / (bn + max(hops)) if bn > 0 else 0.0,
            sequences_in_flight=budget.batch * len(stages),
        ),
        budget=budget,
        constants=c,
    )


def layer_stage(
    units: list[Unit], layer: int, budget: Budget, c: Constants, *, gather_output: bool = False
) -> Prediction:
    """One whole layer alone on one socket, as the real-layer stage runs it. The measured stage
    does not gather the layer's output (a pipeline stage does: `gather_output`)."""
    return predict(layer_load(units, layer, budget, gather_output=gather_output), budget, c)[1]


def layer_load(
    units: list[Unit], layer: int, budget: Budget, *, gather_output: bool = False
) -> Load:
    """What `layer_stage` times: the whole layer's load on one socket."""
    idx = [i for i, u in enumerate(units) if u.layer == layer and u.kind != "experts"]
    if not idx:
        raise PlanError(f"layer {layer}: the model has no such layer")
    pieces = [
        Piece(i, units[i].kind, layer, 0, units[i].rows, units[i].rows, units[i].bytes) for i in idx
    ]
    load = stage_load(units, pieces, budget)
    if not gather_output:
        out = sum(units[i].act_out for i in idx)
        load = dataclasses.replace(load, act_bytes=load.act_bytes - out)
    return load


def budget_for_ways(ways: int) -> int:
    """Lockable L2 bytes per core at `ways` reserved ways of a 2 MiB 16-way L2 (7/8 lockable)."""
    return ways * (2 * 1024 * 1024 // 16) * 7 // 8
