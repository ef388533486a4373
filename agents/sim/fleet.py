"""Simulated EP groups that report windows to a controller and apply what it answers.

Each instance routes tokens with a `LoadModel` (agents/sim/load.py), spreads every expert's tokens over the slots that
hold it (per the placement it runs), and posts one `Snapshot` per rank per window over HTTP. All
ranks of an instance switch placement together, at the next window, as real EP groups must. Like the real
agent, the fleet registers its deployments again when the controller no longer knows them, and sends the
table it runs when the controller no longer knows its placement version (agents/telemetry/poster.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import httpx
import numpy as np
import torch

from agents.protocol import (
    PLACEMENT_UNKNOWN,
    Array,
    DesiredState,
    Identity,
    LatencySummary,
    ModelShape,
    Role,
    RunningPlacement,
    Snapshot,
    error_code,
)
from agents.protocol.placement import default_slot_to_expert, effective_share, gpu_load, slot_load
from agents.runtime.placement import Placement
from agents.sim.cost import GPU_NODES, Links, step_times
from agents.sim.load import LoadModel
from agents.sim.reach import GROUP_AFFINITY, Routing, sample_reach

log = logging.getLogger("moectl.sim")

MAX_REACH_TOKENS = 32  # tokens per rank and window whose groups and nodes a window samples, at least
MAX_SAMPLED_TOKENS = 512  # per instance and window, for traffic and recall to 1-2%, if ranks are few
DEFAULT_MODEL = ModelShape(name="sim-moe-64e", num_layers=8, num_experts=64, num_groups=8, top_k=6)


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
    is_group_limit_bypassed: bool = False  # the seeds' incident: tokens reach every group whatever the limit
    _tables: tuple | None = field(default=None, init=False, repr=False)  # (version, routing tables) in force

    def __post_init__(self) -> None:
        self.slot_to_expert = default_slot_to_expert(self.model.num_layers, self.model.num_experts,
                                                     self.ep_size * self.slots_per_rank)

    def shares(self) -> np.ndarray:
        """[num_layers, num_slots] share of its expert's tokens each slot takes, as the runtime splits."""
        return effective_share(self.slot_to_expert, self.slot_share, self.model.num_experts)

    def routed_topk_group(self) -> int | None:
        """The groups a token may reach as the instance routes; None: every group."""
        return None if self.is_group_limit_bypassed else self.topk_group or self.model.topk_group

    def window(self, window_start: float, window_seconds: float, num_tokens: int) -> list[Snapshot]:
        rng, model = self.load.rng, self.model
        popularity = self.load.popularity()
        expert_tokens = self.load.route(popularity, num_tokens)
        # each rank's attention is data parallel: it routes its own share of the tokens
        per_rank = rng.multinomial(expert_tokens, np.full(self.ep_size, 1.0 / self.ep_size))  # [L, E, R]
        slot_tokens = np.rint(slot_load(self.slot_to_expert, expert_tokens, self.shares()))
        routing = self._routing(self.routed_topk_group() or model.num_groups)
        # a sample of each rank's tokens: what the group limit bounds, at a bounded cost per window
        num_sampled = min(num_tokens // self.ep_size, max(MAX_REACH_TOKENS, MAX_SAMPLED_TOKENS // self.ep_size))
        reaches = [sample_reach(popularity, num_sampled, rng, routing, home_rank=rank) for rank in range(self.ep_size)]
        reach = sum(reaches[1:], reaches[0])
        num_steps = int(window_seconds * 20)
        times = step_times(gpu_load(slot_tokens, self.ep_size), num_tokens / self.ep_size,
                           reach.traffic(model.top_k), self.links, num_steps)
        queries = num_tokens // self.ep_size * 4
        drafts = num_tokens // self.ep_size // 4
        quality = reach.quality(model.top_k)
        acceptance = self.mtp_acceptance * quality
        snapshots = []
        for rank in range(self.ep_size):
            ident = Identity(deployment=self.deployment, instance=self.instance, role=self.role, rank=rank,
                             ep_size=self.ep_size, slots_per_rank=self.slots_per_rank,
                             gpus_per_node=self.gpus_per_node,
                             node=f"{self.instance}-node{rank // self.gpus_per_node}")
            columns = slice(rank * self.slots_per_rank, (rank + 1) * self.slots_per_rank)
            ttft = rng.gamma(4.0, 0.05, 32)
            # two MTP draft positions: the second is verified only where the first was accepted
            accepted = [int(rng.binomial(drafts, acceptance))]
            accepted.append(int(rng.binomial(accepted[0], 0.7 * quality)))
            snapshots.append(Snapshot(
                identity=ident, model=self.model, window_start=window_start, window_seconds=window_seconds,
                placement_version=self.placement_version, num_steps=num_steps,
                expert_tokens=Array.from_numpy(per_rank[:, :, rank]),
                slot_tokens=Array.from_numpy(slot_tokens[:, columns].astype(np.int64)),
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
                routing_nodes_per_token=reaches[rank].nodes.sum(0).tolist()))
        self.load.drift()
        return snapshots

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
        if desired.slot_to_expert is None or desired.placement_version == self.placement_version:
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


class FleetClient:
    """Talks to the controller for a fleet: registers deployments, posts windows, applies answers."""

    def __init__(self, client: httpx.Client, *, api_token: str, agent_token: str):
        self.client, self.api_token, self.agent_token = client, api_token, agent_token
        self.policies: dict[str, dict | None] = {}  # deployment -> the policy this client registered it with

    def register(self, fleet: list[SimInstance], policy: dict | None = None) -> None:
        for deployment, model in {(i.deployment, i.model) for i in fleet}:
            body = {"model": model.model_dump()} | ({"policy": policy} if policy else {})
            response = self.client.put(f"/v1/deployments/{deployment}", json=body,
                                       headers={"Authorization": f"Bearer {self.api_token}"})
            response.raise_for_status()
            self.policies[deployment] = policy

    def post_window(self, fleet: list[SimInstance], window_start: float, window_seconds: float,
                    num_tokens: int = 8192) -> None:
        """Every rank posts; each instance then applies the answer (all its ranks agree on it)."""
        for instance in fleet:
            answers = [answer for snapshot in instance.window(window_start, window_seconds, num_tokens)
                       if (answer := self._post(instance, snapshot)) is not None]
            if answers and len({a.placement_version for a in answers}) == 1:
                instance.apply(answers[0])

    def _post(self, instance: SimInstance, snapshot: Snapshot) -> DesiredState | None:
        response = self._send(snapshot)
        if response.status_code == 404 and instance.deployment in self.policies:  # the controller forgot it
            self.register([instance], self.policies[instance.deployment])
            response = self._send(snapshot)
        if response.status_code == 409 and error_code(response.content) == PLACEMENT_UNKNOWN:
            log.warning("%s: the controller never issued placement v%d; sending the table the instance runs",
                        instance.instance, instance.placement_version)
            response = self._send(snapshot.model_copy(update={"running_placement": instance.running_placement()}))
        if response.status_code != 200:
            log.warning("%s rank %d: %d %s", instance.instance, snapshot.identity.rank, response.status_code,
                        response.text[:200])
            return None
        return DesiredState.model_validate_json(response.content)

    def _send(self, snapshot: Snapshot) -> httpx.Response:
        return self.client.post("/v1/agents/snapshot", content=snapshot.model_dump_json(),
                                headers={"Authorization": f"Bearer {self.agent_token}",
                                         "Content-Type": "application/json"})
