"""Simulated EP groups that report windows to a controller and apply what it answers.

Each instance routes tokens with a `LoadModel` (agents/sim/load.py) and spreads every expert's tokens over the
slots that hold it (per the placement it runs). Its window is one `Snapshot` per rank (`moectl.v1`) or one
`GroupSnapshot` for the whole instance (`moectl.v2`, agents/protocol/group.py); agents/sim/fleet_client.py posts
them over HTTP. All ranks of an instance switch placement together, at the next window, as real EP groups must.
Fleets come in the shapes of agents/sim/models.py (`deepseek-v3`: prefill EP32 and decode EP320 instances).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from agents.protocol import (
    Array,
    DesiredState,
    Identity,
    LatencySummary,
    ModelShape,
    Role,
    RunningPlacement,
    Snapshot,
    StepLoad,
    replica_split,
)
from agents.protocol.group import GroupSnapshot, RankRow
from agents.protocol.placement import default_slot_to_expert, effective_share, gpu_load, slot_load
from agents.runtime.placement import Placement
from agents.sim.cost import GPU_NODES, Links, step_times
from agents.sim.load import LoadModel
from agents.sim.models import SIM_MOE, ModelLayout, layout_for_gpus
from agents.sim.reach import GROUP_AFFINITY, Routing, sample_reach

log = logging.getLogger("moectl.sim")

DEFAULT_MODEL = SIM_MOE
DEFAULT_TOKENS_PER_WINDOW = 8192  # an instance without a layout's rate
MAX_REACH_TOKENS = 32  # tokens per rank and window whose groups and nodes a window samples, at least
MAX_SAMPLED_TOKENS = 512  # per instance and window, for traffic and recall to 1-2%, if ranks are few
MAX_REACH_RANKS = 16  # home ranks whose tokens a window samples


@dataclass(frozen=True)
class _Drawn:
    rng: np.random.Generator
    expert_tokens: np.ndarray  # [num_layers, num_experts], the instance's
    slot_tokens: np.ndarray  # [num_layers, num_slots] int64
    rows: list[RankRow]


@dataclass
class SimInstance:
    deployment: str
    instance: str
    role: Role
    model: ModelShape
    ep_size: int
    slots_per_rank: int
    load: LoadModel
    gpus_per_node: int = 8
    links: Links = GPU_NODES
    group_affinity: float = GROUP_AFFINITY  # agents/sim/reach.py
    mtp_acceptance: float = 0.85  # at draft position 1, routing as the model was trained
    placement_version: int = 0
    slot_to_expert: np.ndarray = field(init=False)  # [num_layers, num_slots]
    slot_share: np.ndarray | None = None  # [num_layers, num_slots] or even split
    topk_group: int | None = None  # routing limit issued; None: the model's own (every group if it has none)
    tokens_per_rank_second: int = 0  # the layout's rate (agents/sim/models.py); 0: callers say how many tokens
    rng: np.random.Generator | None = None  # this instance's draws; None: the load model's own
    is_group_limit_bypassed: bool = False  # a production bug: tokens reach every group whatever the limit
    is_switch_stuck: bool = False  # a production bug: the group keeps its placement whatever it is told
    # the engine's own balancer acts every this many windows, counted in rank 0's `balancer_events` (vLLM's
    # rearranges, SGLang's dumps); 0: not watched. is_balancer_stopped: it stopped acting (vLLM's async EPLB that went
    # quiet, SGLang's recorder that no longer dumps). is_load_in_acts: the load comes only in the acts (SGLang's
    # dumps): a window without one counts no tokens, its ranks' serving counters still say what they served
    balancer_every_windows: int = 0
    is_balancer_stopped: bool = False
    is_load_in_acts: bool = False
    num_windows_drawn: int = field(default=0, init=False)
    # [num_steps, num_layers, num_experts] token-expert pairs of MoE steps, as the group's dispatch-time split
    # counts them: every window reports their step straggler (`step_load`); None: not measured (the default)
    step_counts: np.ndarray | None = None
    _tables: tuple | None = field(default=None, init=False, repr=False)  # (version, routing tables) in force

    def __post_init__(self) -> None:
        self.slot_to_expert = default_slot_to_expert(self.model.num_layers, self.model.num_experts,
                                                     self.ep_size * self.slots_per_rank)

    def shares(self) -> np.ndarray:
        """[num_layers, num_slots] share of its expert's tokens each slot takes, as the runtime splits."""
        return effective_share(self.slot_to_expert, self.slot_share, self.model.num_experts)

    def step_load(self) -> StepLoad | None:
        """What each rank of a group routing by the dispatch-time split reports for `step_counts` under the
        placement it runs (agents/runtime/ep.py split_slots, summed as agents/telemetry/windows.py does); None
        without step_counts."""
        if self.step_counts is None:
            return None
        counts, num_gpus = np.asarray(self.step_counts, dtype=np.int64), self.ep_size
        gpus, share = replica_split.replica_gpus(self.slot_to_expert, self.slot_share, self.model.num_experts, num_gpus)
        shares = replica_split.gpu_load_of(replica_split.fixed_split(counts, share), gpus, num_gpus)  # [N, L, G]
        split = replica_split.gpu_load_of(replica_split.balance_split(counts, gpus, share, num_gpus), gpus, num_gpus)
        return StepLoad(is_split_routed=True, split_max_tokens=float(split.max(-1).sum()),
                        shares_max_tokens=float(shares.max(-1).sum()),
                        bound_max_tokens=float(replica_split.split_bound(counts, gpus, split).sum()),
                        mean_tokens=float(counts.sum()) / num_gpus)

    def routed_topk_group(self) -> int | None:
        """The groups a token may reach as the instance routes; None: every group."""
        return None if self.is_group_limit_bypassed else self.topk_group or self.model.topk_group

    def tokens_per_window(self, window_seconds: float) -> int:
        """Tokens the whole instance routes in a window at its layout's rate (0 when it has none)."""
        return int(self.tokens_per_rank_second * self.ep_size * window_seconds)

    def window(self, window_start: float, window_seconds: float, num_tokens: int | None = None) -> list[Snapshot]:
        """One v1 snapshot per rank. num_tokens: routed by the whole instance (default: its layout's rate)."""
        drawn = self._draw(window_seconds, num_tokens)
        # each rank's attention is data parallel: it routes its own share of the tokens
        per_rank = drawn.rng.multinomial(drawn.expert_tokens, np.full(self.ep_size, 1.0 / self.ep_size))  # [L, E, R]
        snapshots = []
        for rank, row in enumerate(drawn.rows):
            ident = Identity(deployment=self.deployment, instance=self.instance, role=self.role, rank=rank,
                             ep_size=self.ep_size, slots_per_rank=self.slots_per_rank,
                             gpus_per_node=self.gpus_per_node, node=row.node)
            columns = slice(rank * self.slots_per_rank, (rank + 1) * self.slots_per_rank)
            snapshots.append(Snapshot(
                identity=ident, model=self.model, window_start=window_start, window_seconds=window_seconds,
                expert_tokens=Array.from_numpy(per_rank[:, :, rank]),
                slot_tokens=Array.from_numpy(drawn.slot_tokens[:, columns]),
                **row.model_dump(exclude={"rank", "node", "gpu_uuid"})))
        return snapshots

    def group_window(self, window_start: float, window_seconds: float,
                     num_tokens: int | None = None) -> GroupSnapshot:
        """The v2 group snapshot rank 0 posts for the whole instance."""
        drawn = self._draw(window_seconds, num_tokens)
        return GroupSnapshot(deployment=self.deployment, instance=self.instance, role=self.role,
                             ep_size=self.ep_size, slots_per_rank=self.slots_per_rank,
                             gpus_per_node=self.gpus_per_node, model=self.model, window_start=window_start,
                             window_seconds=window_seconds, expert_tokens=Array.from_numpy(drawn.expert_tokens),
                             slot_tokens=Array.from_numpy(drawn.slot_tokens), ranks=drawn.rows)

    def _draw(self, window_seconds: float, num_tokens: int | None) -> _Drawn:
        """One window of the instance: what its routers send where, what its slots process, each rank's
        counters; then the load drifts."""
        rng, model = self.rng or self.load.rng, self.model
        if num_tokens is None:
            num_tokens = self.tokens_per_window(window_seconds) or DEFAULT_TOKENS_PER_WINDOW
        popularity = self.load.popularity()
        expert_tokens = self.load.route(popularity, num_tokens, rng)
        slot_tokens = np.rint(slot_load(self.slot_to_expert, expert_tokens, self.shares())).astype(np.int64)
        routing = self._routing(self.routed_topk_group() or model.num_groups)
        # a sample of each rank's tokens: what the group limit bounds, at a bounded cost per window. Past
        # MAX_REACH_RANKS ranks, one sample stands for the ranks next to its home rank (one per rank cost
        # half a minute a window at EP320)
        num_sampled = min(num_tokens // self.ep_size, max(MAX_REACH_TOKENS, MAX_SAMPLED_TOKENS // self.ep_size))
        num_homes = min(self.ep_size, MAX_REACH_RANKS)
        samples = [sample_reach(popularity, num_sampled, rng, routing, home_rank=h * self.ep_size // num_homes)
                   for h in range(num_homes)]
        reaches = [samples[rank * num_homes // self.ep_size] for rank in range(self.ep_size)]
        reach = sum(samples[1:], samples[0])
        num_steps = int(window_seconds * 20)
        times = step_times(gpu_load(slot_tokens, self.ep_size), num_tokens / self.ep_size,
                           reach.traffic(model.top_k), self.links, num_steps)
        queries = num_tokens // self.ep_size * 4
        drafts = num_tokens // self.ep_size // 4
        quality = reach.quality(model.top_k)
        step_load = self.step_load()  # the group's numbers: every rank reports them
        acts = None
        if self.balancer_every_windows:
            acts = int(not self.is_balancer_stopped and self.num_windows_drawn % self.balancer_every_windows == 0)
        self.num_windows_drawn += 1
        if acts == 0 and self.is_load_in_acts:
            expert_tokens, slot_tokens = np.zeros_like(expert_tokens), np.zeros_like(slot_tokens)
        acceptance = self.mtp_acceptance * quality
        rows = []
        for rank in range(self.ep_size):
            ttft = rng.gamma(4.0, 0.05, 32)
            # two MTP draft positions: the second is verified only where the first was accepted
            accepted = [int(rng.binomial(drafts, acceptance))]
            accepted.append(int(rng.binomial(accepted[0], 0.7 * quality)))
            rows.append(RankRow(
                rank=rank, node=f"{self.instance}-node{rank // self.gpus_per_node}",
                placement_version=self.placement_version, num_steps=num_steps,
                forward_seconds=times.forward_seconds, dispatch_seconds=times.dispatch_seconds,
                combine_seconds=times.combine_seconds, prefix_query_tokens=queries,
                prefix_hit_tokens=int(rng.binomial(queries, 0.55)), spec_drafts=drafts,
                spec_draft_tokens=2 * drafts, spec_accepted_tokens=sum(accepted),
                spec_accepted_by_position=accepted,
                requests_running=int(rng.poisson(24)), requests_waiting=int(rng.poisson(3)),
                ttft=LatencySummary(count=len(ttft), sum=float(ttft.sum()), p50=float(np.quantile(ttft, 0.5)),
                                    p90=float(np.quantile(ttft, 0.9)), p99=float(np.quantile(ttft, 0.99))),
                routing_recall=reach.recall(model.top_k),
                routing_groups_per_token=reaches[rank].groups.sum(0).tolist(),
                routing_nodes_per_token=reaches[rank].nodes.sum(0).tolist(), step_load=step_load,
                balancer_events=acts if rank == 0 else None))
        self.load.drift()
        return _Drawn(rng, expert_tokens, slot_tokens, rows)

    def running_placement(self) -> RunningPlacement:
        """The table every rank of the instance runs (placement_version names it)."""
        share = None if self.slot_share is None else Array.from_numpy(self.slot_share)
        return RunningPlacement(slot_to_expert=Array.from_numpy(self.slot_to_expert), slot_share=share)

    def _routing(self, topk_group: int) -> Routing:
        if self._tables is None or self._tables[0] != self.placement_version:
            share = None if self.slot_share is None else torch.tensor(self.slot_share)  # a copy: answers are read-only
            table = Placement(torch.tensor(self.slot_to_expert), share)
            self._tables = (self.placement_version, table.routing_tables(self.model.num_experts))
        return Routing(self.model.num_groups, self.model.top_k, topk_group, *self._tables[1], self.slots_per_rank,
                       self.gpus_per_node, self.ep_size, self.model.topk_group, self.group_affinity)

    def apply(self, desired: DesiredState) -> None:
        self.topk_group = desired.routing.topk_group
        if desired.slot_to_expert is None or desired.placement_version == self.placement_version \
                or self.is_switch_stuck:
            return
        table = desired.slot_to_expert.to_numpy()
        if table.shape != self.slot_to_expert.shape:
            log.error("%s: ignoring placement v%d of shape %s", self.instance, desired.placement_version,
                      table.shape)
            return
        self.slot_to_expert = table.astype(np.int64)
        self.slot_share = desired.slot_share.to_numpy() if desired.slot_share is not None else None
        self.placement_version = desired.placement_version


def make_fleet(num_deployments: int = 2, ep_size: int = 8, slots_per_rank: int = 10,
               model: ModelShape = DEFAULT_MODEL, seed: int = 0, gpus_per_node: int = 8,
               links: Links = GPU_NODES, group_affinity: float = GROUP_AFFINITY) -> list[SimInstance]:
    return [SimInstance(deployment=f"sim-{i}", instance=f"sim-{i}-decode-0", role=Role.decode, model=model,
                        ep_size=ep_size, slots_per_rank=slots_per_rank, gpus_per_node=gpus_per_node, links=links,
                        group_affinity=group_affinity,
                        load=LoadModel(model.num_layers, model.num_experts, model.top_k, seed=seed + i))
            for i in range(num_deployments)]


def layout_fleet(layout: ModelLayout, *, deployment: str, seed: int = 0) -> list[SimInstance]:
    """Every instance of every pool of one deployment. The instances of a pool serve the same model and
    workload, so they share hot experts (one load model's seed) and draw their tokens apart."""
    fleet = []
    for p, pool in enumerate(layout.pools):
        for i in range(pool.num_instances):
            load = LoadModel(layout.model.num_layers, layout.model.num_experts, layout.model.top_k, seed=seed + p)
            fleet.append(SimInstance(deployment=deployment, instance=f"{deployment}-{pool.role.value}-{i}",
                                     role=pool.role, model=layout.model, ep_size=pool.ep_size,
                                     slots_per_rank=pool.slots_per_rank, load=load,
                                     gpus_per_node=layout.gpus_per_node,
                                     tokens_per_rank_second=pool.tokens_per_rank_second,
                                     rng=np.random.default_rng([seed, p, i])))
    return fleet


def deepseek_fleet(num_gpus: int, *, seed: int = 0) -> list[SimInstance]:
    """A DeepSeek-V3 deployment of about `num_gpus` GPUs (agents/sim/models.py: 320 -> one decode EP320
    instance; 1,024 -> three decode and two prefill EP32 instances)."""
    return layout_fleet(layout_for_gpus("deepseek-v3", num_gpus), deployment="deepseek-v3", seed=seed)

