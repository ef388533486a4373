"""The wire contract between agents and the controller: what one round trip carries.

An agent posts one `Snapshot` per window (one EP rank's view of that window) and gets a
`DesiredState` back in the response, so one round trip both reports and reconciles.

Arrays travel as `Array`: dtype, shape and the little-endian bytes, zlib-compressed and base64
encoded. A [58, 256] int64 load matrix is ~120 kB raw and a few kB on the wire, where a JSON list
of numbers would be ~400 kB and slow to parse. `PROTOCOL_VERSION` changes with any incompatible
change; the controller rejects versions it does not speak.

Every field is bounded, so what the controller stores and sums always fits (a tighter check of what
was always meant, hence no new protocol version):

- counts (tokens, steps, requests, drafts; every element of the load arrays and histograms) at most `MAX_COUNT` = 2^40
  per rank and window: a rank routing 10^6 tokens/s over the longest window (3600 s) counts 3.6e9, 2^32;
  and the controller's int64 window sums stay exact up to 2^23 reports of one window (a 1,024-GPU
  fleet sends 2^10), while it still checks each sum (`controlplane/store/windows.py`).
- seconds (step time sums, latencies) finite and at most `MAX_SECONDS` = 1e9, thirty years: summed over
  any number of ranks they stay finite (two ranks of 1.7e308 summed to Infinity).
- names at most as long as the controller's columns (instance 128, node 256, gpu_uuid 128, model name
  128) and printable: no NUL byte (PostgreSQL's text cannot hold one) nor other control characters.
- sizes where the controller keeps 32-bit integers: gpus_per_node at most 1024 GPUs on one node,
  placement versions under 2^31.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from enum import StrEnum
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

PROTOCOL_VERSION = "moectl.v1"


def known_protocol(value: object) -> object:
    """The `protocol` field's check, for every message that carries one."""
    if value != PROTOCOL_VERSION:
        raise ValueError(f"protocol {value!r} is not spoken here; this controller speaks {PROTOCOL_VERSION!r}")
    return value


NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"  # DNS label: also a Kubernetes object name

_DTYPES = {"int64": np.dtype("<i8"), "float32": np.dtype("<f4"), "float64": np.dtype("<f8")}
MAX_ARRAY_ELEMENTS = 16_000_000  # 58 layers x 288 slots x 320 GPUs fits with room
MAX_COUNT = 2**40  # per rank and window; see the module docstring
MAX_SECONDS = 1e9
MAX_VERSION = 2**31 - 1  # the controller keeps versions in 32-bit integers
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"  # no NUL byte, no control characters


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Array(_Frozen):
    """A numeric array on the wire: `data` is base64(zlib(little-endian C-order bytes))."""

    dtype: Literal["int64", "float32", "float64"]
    shape: tuple[int, ...] = Field(max_length=8)
    data: str

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> Array:
        array = np.asarray(array)
        kind = "int64" if array.dtype.kind in "iub" else ("float32" if array.dtype == np.float32 else "float64")
        raw = np.ascontiguousarray(array, dtype=_DTYPES[kind]).tobytes()
        return cls(dtype=kind, shape=array.shape, data=base64.b64encode(zlib.compress(raw, 1)).decode())

    @model_validator(mode="after")
    def _check_size(self) -> Array:
        if any(d < 0 for d in self.shape):
            raise ValueError(f"array shape {list(self.shape)} has a negative dimension")
        if any(d > MAX_ARRAY_ELEMENTS for d in self.shape) or \
                int(np.prod(self.shape, dtype=np.int64)) > MAX_ARRAY_ELEMENTS:
            raise ValueError(f"array shape {list(self.shape)} exceeds {MAX_ARRAY_ELEMENTS} elements")
        return self

    def to_numpy(self) -> np.ndarray:
        """Decodes and checks that the bytes match dtype and shape; raises ValueError otherwise."""
        dtype = _DTYPES[self.dtype]
        expected = int(np.prod(self.shape, dtype=np.int64)) * dtype.itemsize
        try:
            # max_length bounds a zip bomb: never inflate past what the shape promises
            inflater = zlib.decompressobj()
            raw = inflater.decompress(base64.b64decode(self.data, validate=True), expected + 1)
        except (binascii.Error, zlib.error) as exc:
            raise ValueError(f"array data is not base64(zlib(bytes)): {exc}") from None
        if len(raw) != expected:
            raise ValueError(f"array data holds {len(raw)} bytes, shape {list(self.shape)} "
                             f"of {self.dtype} needs {expected}")
        return np.frombuffer(raw, dtype=dtype).reshape(self.shape)


class Role(StrEnum):
    prefill = "prefill"
    decode = "decode"
    unified = "unified"


class ModelShape(_Frozen):
    """The MoE shape the placement is about: counts per MoE layer, not per model."""

    name: str = Field(min_length=1, max_length=128, pattern=PRINTABLE)
    num_layers: int = Field(ge=1, le=1024, description="MoE layers")
    num_experts: int = Field(ge=1, le=4096, description="routed logical experts per MoE layer")
    num_groups: int = Field(ge=1, le=4096, description="expert groups for group-limited routing")
    top_k: int = Field(ge=1, le=4096, description="routed experts per token")
    topk_group: int | None = Field(default=None, ge=1, le=4096,
                                   description="the model's own group limit (groups per token); None: none")

    @model_validator(mode="after")
    def _check(self) -> ModelShape:
        if self.num_experts % self.num_groups:
            raise ValueError(f"num_experts {self.num_experts} is not a multiple of num_groups {self.num_groups}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if self.topk_group is not None and self.topk_group > self.num_groups:
            raise ValueError(f"topk_group {self.topk_group} exceeds num_groups {self.num_groups}")
        return self


class Identity(_Frozen):
    """Who reports: one rank of one EP group (an instance) of a deployment's pool (its role)."""

    deployment: str = Field(pattern=NAME_PATTERN)
    instance: str = Field(min_length=1, max_length=128, pattern=PRINTABLE)
    role: Role
    rank: int = Field(ge=0)
    ep_size: int = Field(ge=1, le=4096)
    slots_per_rank: int = Field(ge=1, le=4096)
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    node: str = Field(default="", max_length=256, pattern=PRINTABLE)
    gpu_uuid: str = Field(default="", max_length=128, pattern=PRINTABLE)

    @model_validator(mode="after")
    def _check(self) -> Identity:
        if self.rank >= self.ep_size:
            raise ValueError(f"rank {self.rank} is outside an EP group of size {self.ep_size}")
        return self


class LatencySummary(_Frozen):
    """A latency distribution over one window, in seconds."""

    count: int = Field(default=0, ge=0, le=MAX_COUNT)
    sum: float = Field(default=0.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    p50: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    p90: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    p99: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)

    @classmethod
    def of(cls, samples: list[float]) -> LatencySummary:
        """The distribution of `samples` (seconds): count, sum and percentiles; empty when there are none."""
        if not samples:
            return cls()
        values = np.asarray(samples, dtype=np.float64)
        p50, p90, p99 = np.quantile(values, [0.5, 0.9, 0.99])
        return cls(count=len(values), sum=float(values.sum()), p50=float(p50), p90=float(p90), p99=float(p99))


class RunningPlacement(_Frozen):
    """The placement table a rank runs, sent only to a controller that refused the snapshot's
    placement_version as never issued (a 409 with code `PLACEMENT_UNKNOWN`: its database was restored or
    replaced). The controller adopts it as that version and the loop goes on from what the fleet runs.

    slot_to_expert: [num_layers, ep_size * slots_per_rank] int64, the whole EP group's table.
    slot_share: same shape, non-negative weights of an expert's tokens over its replicas; None: even split.
    """

    slot_to_expert: Array
    slot_share: Array | None = None

    def check(self, num_layers: int, num_experts: int, num_slots: int) -> None:
        """Raises ValueError naming what makes the table one no rank can run."""
        table = self.slot_to_expert.to_numpy()
        if table.shape != (num_layers, num_slots) or self.slot_to_expert.dtype != "int64":
            raise ValueError(f"running_placement.slot_to_expert is {self.slot_to_expert.dtype} "
                             f"{list(table.shape)}, the pool needs int64 {[num_layers, num_slots]}")
        if table.min() < 0 or table.max() >= num_experts:
            raise ValueError(f"running_placement.slot_to_expert holds expert ids outside 0..{num_experts - 1}")
        held = np.zeros((num_layers, num_experts), bool)
        held[np.arange(num_layers)[:, None], table] = True
        if not held.all():
            layer = int(np.flatnonzero(~held.all(axis=1))[0])
            raise ValueError(f"running_placement.slot_to_expert: layer {layer} gives no slot to experts "
                             f"{np.flatnonzero(~held[layer]).tolist()[:8]}")
        if self.slot_share is not None:
            share = self.slot_share.to_numpy()
            if share.shape != table.shape or not np.isfinite(share).all() or (share < 0).any():
                raise ValueError("running_placement.slot_share must be finite, non-negative and shaped like "
                                 "slot_to_expert")


# the `code` beside `detail` in the body of a 409 that refuses a snapshot's placement_version as never issued
PLACEMENT_UNKNOWN = "placement_version_unknown"


def error_code(body: bytes) -> str | None:
    """The `code` of a controller's error body (e.g. PLACEMENT_UNKNOWN); None when it has none."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("code") if isinstance(data, dict) else None

_Count = Field(default=0, ge=0, le=MAX_COUNT)
_Seconds = Field(default=0.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
MAX_TOP_K = 64  # routed experts per token a per-token histogram has room for (DeepSeek-V3 routes 8)


class ServingCounters(_Frozen):
    """One rank's serving work over a window: what the pool planner sizes pools from
    (controlplane/plan_pools.py). Means are time-weighted over the window, idle time included; "at the
    window's end" values are the last step's."""

    busy_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="time inside steps that ran work")
    prefill_tokens: int = Field(default=0, ge=0, description="prompt tokens computed here (prefix-cache hits excluded)")
    num_prefilled: int = Field(default=0, ge=0, description="requests whose prefill finished here")
    queued_tokens: int = Field(default=0, ge=0, description="prompt tokens waiting for admission at the window's end")
    num_waiting: int = Field(default=0, ge=0, description="requests not admitted at the window's end: no KV room or "
                                                          "batch slot (hand-offs not yet imported included)")
    batch_mean: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="sequences running, mean")
    kv_tokens_mean: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="KV tokens held, mean")
    kv_capacity_tokens: int = Field(default=0, ge=0, description="KV tokens this rank can hold")
    max_batch: int = Field(default=0, ge=0, description="sequences this rank batches at most")


class Snapshot(_Frozen):
    """One rank's counters over one window.

    expert_tokens: [num_layers, num_experts] tokens this rank's router sent to each logical expert.
    slot_tokens:   [num_layers, slots_per_rank] tokens this rank's expert slots processed.
    """

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    identity: Identity
    model: ModelShape
    window_start: float = Field(gt=0, allow_inf_nan=False, description="unix seconds")
    window_seconds: float = Field(gt=0, le=3600, allow_inf_nan=False)
    placement_version: int = Field(ge=0, le=MAX_VERSION, description="the placement this rank ran during the window")
    num_steps: int = _Count
    expert_tokens: Array
    slot_tokens: Array
    forward_seconds: float = _Seconds
    dispatch_seconds: float = _Seconds
    combine_seconds: float = _Seconds
    prefix_query_tokens: int = _Count
    prefix_hit_tokens: int = _Count
    spec_drafts: int = _Count
    spec_draft_tokens: int = _Count
    spec_accepted_tokens: int = _Count
    spec_accepted_by_position: list[Annotated[int, Field(ge=0, le=MAX_COUNT)]] = Field(
        default=[], max_length=16, description="accepted draft tokens at draft position 0, 1, ...")
    requests_running: int = _Count
    requests_waiting: int = _Count
    ttft: LatencySummary = LatencySummary()
    itl: LatencySummary = LatencySummary()
    routing_recall: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    running_placement: RunningPlacement | None = Field(
        default=None, description="the table placement_version names; sent only after a PLACEMENT_UNKNOWN refusal")

    @model_serializer(mode="wrap")
    def _omit_absent_table(self, handler):  # noqa: ANN001
        # without a table the snapshot reads exactly as before: controllers that predate the field forbid it
        data = handler(self)
        if self.running_placement is None and isinstance(data, dict):
            data.pop("running_placement", None)
        return data
    # optional (agents before them omit them): what a group limit bounds, measured as the router ran
    routing_groups_per_token: list[Annotated[int, Field(ge=0, le=MAX_COUNT)]] = Field(
        default=[], max_length=MAX_TOP_K + 1,
        description="tokens (summed over MoE layers) whose top-k experts reached 0, 1, 2, .. top_k distinct "
                    "expert groups; []: not measured")
    routing_nodes_per_token: list[Annotated[int, Field(ge=0, le=MAX_COUNT)]] = Field(
        default=[], max_length=MAX_TOP_K + 1,
        description="the same by distinct nodes (EP ranks grouped by gpus_per_node) holding the chosen replicas")
    serving: ServingCounters | None = Field(default=None, description="serving work for the pool planner; "
                                                                      "absent from agents that do not measure it")

    @field_validator("protocol", mode="before")
    @classmethod
    def _known_protocol(cls, value: object) -> object:
        if value == "moectl.v2":
            raise ValueError("protocol 'moectl.v2' is a group snapshot: post it to /v2/agents/snapshot")
        return known_protocol(value)

    @model_validator(mode="after")
    def _check(self) -> Snapshot:
        m, ident = self.model, self.identity
        _check_counts("expert_tokens", self.expert_tokens, (m.num_layers, m.num_experts))
        _check_counts("slot_tokens", self.slot_tokens, (m.num_layers, ident.slots_per_rank))
        if ident.ep_size * ident.slots_per_rank < m.num_experts:
            raise ValueError(f"ep_size x slots_per_rank = {ident.ep_size * ident.slots_per_rank} slots "
                             f"cannot hold {m.num_experts} experts")
        if self.prefix_hit_tokens > self.prefix_query_tokens:
            raise ValueError("prefix_hit_tokens exceeds prefix_query_tokens")
        if self.spec_accepted_tokens > self.spec_draft_tokens:
            raise ValueError("spec_accepted_tokens exceeds spec_draft_tokens")
        if sum(self.spec_accepted_by_position) > self.spec_accepted_tokens:
            raise ValueError("spec_accepted_by_position must be counts that sum to at most spec_accepted_tokens")
        if self.running_placement is not None:
            self.running_placement.check(m.num_layers, m.num_experts, ident.ep_size * ident.slots_per_rank)
        _check_per_token(self.routing_groups_per_token, self.routing_nodes_per_token, m.top_k)
        return self


def _check_per_token(groups: list[int], nodes: list[int], top_k: int, where: str = "") -> None:
    """The routing reach histograms of one rank (`where`: which, in a group's message)."""
    histograms = {"routing_groups_per_token": groups, "routing_nodes_per_token": nodes}
    for name, counts in histograms.items():
        if len(counts) > top_k + 1:
            raise ValueError(f"{where}{name} has {len(counts)} bins; a token's top_k={top_k} experts reach at "
                             f"most {top_k}, so at most {top_k + 1} bins (0..top_k)")
    if groups and nodes and sum(groups) != sum(nodes):
        raise ValueError(f"{where}routing_groups_per_token counts {sum(groups)} tokens, routing_nodes_per_token "
                         f"{sum(nodes)}: both count every token routed")


def _check_counts(name: str, array: Array, shape: tuple[int, int]) -> None:
    if tuple(array.shape) != shape:
        raise ValueError(f"{name} has shape {list(array.shape)}, the model needs {list(shape)}")
    values = array.to_numpy()
    if not np.isfinite(values).all():
        raise ValueError(f"{name} holds non-finite values")
    if (values < 0).any():
        raise ValueError(f"{name} holds negative counts")
    if (values > MAX_COUNT).any():
        raise ValueError(f"{name} holds counts over {MAX_COUNT} (2^40), more than one rank sees in a window")


class RoutingLimits(_Frozen):
    topk_group: int | None = Field(default=None, ge=1, le=4096, description="max expert groups per token")
    expert_capacity_factor: float | None = Field(default=None, gt=0, le=1000, allow_inf_nan=False)


class DesiredState(_Frozen):
    """What the controller wants a rank to run; rides the snapshot response.

    slot_to_expert: [num_layers, ep_size * slots_per_rank] int64, the whole EP group's table; sent
    only when the rank reported another placement_version. slot_share: same shape, the fraction of
    its expert's tokens each slot takes (absent: even split across the expert's replicas).
    """

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    placement_version: int = Field(ge=0, le=MAX_VERSION)
    slot_to_expert: Array | None = None
    slot_share: Array | None = None
    routing: RoutingLimits = RoutingLimits()
    local_prefill_threshold: int | None = Field(default=None, ge=0, le=MAX_COUNT,
                                                description="PD-aware threshold, tokens")
    window_seconds: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False,
                                         description="the window length the controller wants")

