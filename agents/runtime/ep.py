import time

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.constants import default_pg_timeout

from agents.runtime import kernels, moe_ops, replica_split
from agents.runtime.config import ModelConfig
from agents.runtime.kernels import refs
from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.runtime.stats import MoECounters


class EPGroup:
    """The ranks of one instance; ep_size 1 runs in-process without torch.distributed."""

    def __init__(self, rank: int, size: int, group=None):
        self.rank, self.size, self.group = rank, size, group

    def all_to_all(
        self, out: Tensor, inp: Tensor, out_splits: list[int], in_splits: list[int], async_op=False
    ):
        if self.size == 1:
            out.copy_(inp)
            return None
        return dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group, async_op=async_op)

    def agree_max(self, values: list[int]) -> list[int]:
        if self.size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.tolist()

    def all_gather(self, tensor: Tensor) -> Tensor:
        """Every rank's `tensor`, stacked in rank order: [W, *tensor.shape]."""
        if self.size == 1:
            return tensor[None]
        out = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(out, tensor.contiguous(), group=self.group)
        return torch.stack(out)

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        """Sums `tensor` over the group, in place; returns it."""
        if self.size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group)
        return tensor

    def gather_objects(self, obj: object) -> list | None:
        """Every rank's `obj` (picklable), in rank order, on rank 0; None on the others."""
        if self.size == 1:
            return [obj]
        out = [None] * self.size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def broadcast_object(self, obj: object) -> object:
        """Rank 0's `obj` (picklable) on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]


def init_ep_group(rank: int, size: int, port: int, backend: str = "gloo", listen_fd: int | None = None) -> EPGroup:
    """Joins the group whose rendezvous store rank 0 serves on 127.0.0.1:`port`; `listen_fd`: rank 0's socket
    already listening there (bound by the process that started the ranks, so nobody else takes the port)."""
    if size > 1 and not dist.is_initialized():
        store = dist.TCPStore("127.0.0.1", port, size, is_master=rank == 0, timeout=default_pg_timeout,
                              master_listen_fd=listen_fd if rank == 0 else None)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size)
    return EPGroup(rank, size)


class ExpertParallel:
    """Dispatch, grouped expert compute and combine for every MoE layer of one rank."""

    def __init__(self, cfg: ModelConfig, group: EPGroup, slots_per_rank: int, device, overlap: bool = True,
                 quantize_dispatch: bool = False, gpus_per_node: int = 8, dispatch_split: str = "off"):
        """`dispatch_split`: "off", "measure" or "on" (EngineConfig.dispatch_split).
        `quantize_dispatch`: send int8 rows (+ fp32 scale per 128 channels) instead of activations; about half
        the bytes of bf16, a quarter of fp32, within scale / 2 per element (agents/runtime/kernels/refs.py).
        `gpus_per_node`: ranks per node, consecutive; it only sorts the slots a token reached into nodes."""
        self.cfg, self.group, self.device, self.overlap = cfg, group, device, overlap
        self.quantize_dispatch = quantize_dispatch
        self.slots_per_rank, self.dispatch_split = slots_per_rank, dispatch_split
        self.num_slots = slots_per_rank * group.size
        self.slots_per_node = slots_per_rank * min(gpus_per_node, group.size)
        self.num_nodes = -(-self.num_slots // self.slots_per_node)
        self.limits = EngineRoutingLimits()
        self.placement: Placement | None = None
        self.counters = self.new_counters()

    def new_counters(self) -> MoECounters:
        counters = MoECounters.zeros(
            self.cfg.num_moe_layers, self.cfg.num_experts, self.slots_per_rank, self.device, self.cfg.top_k,
            is_split_measured=self.dispatch_split != "off",
        )
        counters.is_split_routed = self.dispatch_split == "on"
        return counters

    def apply_placement(self, placement: Placement, moes: list) -> None:
        placement.validate(self.cfg.num_moe_layers, self.cfg.num_experts, self.num_slots)
        expert_to_slots, cum_share = placement.routing_tables(self.cfg.num_experts)  # [L, E, R]
        self.expert_to_slots, self.cum_share = expert_to_slots.to(self.device), cum_share.to(self.device)
        gpus, share, gpu_slot = placement.replica_gpu_tables(self.cfg.num_experts, self.group.size)  # [L, E, R]
        self.expert_to_gpus, self.gpu_share = gpus.to(self.device), share.to(self.device)
        self.gpu_slot = gpu_slot.to(self.device)
        self.replicated = [replica_split.replicated_experts(gpus[i : i + 1]) for i in range(gpus.shape[0])]
        start = self.group.rank * self.slots_per_rank
        local = placement.slot_to_expert[:, start : start + self.slots_per_rank]  # [L, S_local]
        self.w13 = [
            moe.w13.detach().cpu()[local[i]].to(self.device) for i, moe in enumerate(moes)
        ]  # host copy
        self.w2 = [moe.w2.detach().cpu()[local[i]].to(self.device) for i, moe in enumerate(moes)]
        self.placement = placement

    def split_slots(self, layer: int, topk_ids: Tensor, expert_tokens: Tensor) -> Tensor:
        """The dispatch-time split of one MoE layer: gathers the group's per-expert counts ([W, E], one small
        all-gather), solves the split (agents/runtime/replica_split.py) and counts the step's straggler with it, with
        the fixed shares and at the bound. Routes by it when on; by the fixed shares (select_slots) when measuring.
        Returns [T, K] slot ids."""
        c, size = self.counters, self.group.size
        per_rank = self.group.all_gather(expert_tokens)  # [W, E]
        load = per_rank.sum(0)[None]  # [1, E] the group's assignments this step
        gpus, share = self.expert_to_gpus[layer : layer + 1], self.gpu_share[layer : layer + 1]  # [1, E, R]
        fixed = replica_split.gpu_load_of(replica_split.fixed_split(load, share), gpus, size)  # [1, G]
        balance = kernels.ops_for(expert_tokens).balance_split  # one Triton launch on CUDA, its torch twin otherwise
        tokens = balance(load, gpus, share, size, replicated=self.replicated[layer])  # [1, E, R]
        split = replica_split.gpu_load_of(tokens, gpus, size)
        c.split_max_tokens[layer] += split.amax()
        c.shares_max_tokens[layer] += fixed.amax()
        c.bound_max_tokens[layer] += replica_split.split_bound(load, gpus, split)[0]
        c.group_tokens[layer] += load.sum()
        if self.dispatch_split == "measure":
            return moe_ops.select_slots(topk_ids, self.expert_to_slots[layer], self.cum_share[layer])
        offset = per_rank[: self.group.rank].sum(0)  # [E] the group's assignments numbered before this rank's
        return replica_split.select_split_slots(topk_ids, offset, tokens[0], self.gpu_slot[layer])

    def forward(self, moe, x: Tensor, scores: Tensor) -> Tensor:
        cfg, layer, c, ops = self.cfg, moe.moe_index, self.counters, kernels.ops_for(x)
        topk_group = self.limits.topk_group or cfg.topk_group
        weights, topk_ids = ops.grouped_topk(
            scores, moe.bias, cfg.num_groups, topk_group, cfg.top_k, cfg.route_scale
        )
        c.recall_kept[layer] += moe_ops.routing_recall(scores, moe.bias, topk_ids)
        c.recall_total[layer] += topk_ids.numel()
        if self.limits.max_tokens_per_expert is not None:
            weights, topk_ids = moe_ops.limit_capacity(
                weights, topk_ids, cfg.num_experts, self.limits.max_tokens_per_expert
            )
            c.dropped_tokens[layer] += (topk_ids < 0).sum()
        expert_tokens = ops.histogram(topk_ids, cfg.num_experts)  # [E]
        c.expert_tokens[layer] += expert_tokens
        if self.dispatch_split == "off":
            slot_ids = moe_ops.select_slots(topk_ids, self.expert_to_slots[layer], self.cum_share[layer])  # [T, K]
        else:
            slot_ids = self.split_slots(layer, topk_ids, expert_tokens)
        groups, nodes = ops.reach(
            topk_ids, slot_ids, cfg.experts_per_group, cfg.num_groups, self.slots_per_node, self.num_nodes
        )  # [K + 1] each: what the group limit bounds, as this step routed it
        c.groups_per_token[layer] += groups
        c.nodes_per_token[layer] += nodes
        order, counts = ops.permute(slot_ids, self.num_slots)  # counts: [S]
        send_counts = counts.view(self.group.size, self.slots_per_rank)  # [W, S_local]

        in_splits = send_counts.sum(1).tolist()
        send = x[order[: sum(in_splits)] // cfg.top_k]  # [n_send, D] grouped by destination rank, then slot
        wire = refs.pack(*ops.quantize(send)) if self.quantize_dispatch else send  # [n_send, D'] what travels
        t0 = time.perf_counter()
        recv_counts = torch.empty_like(send_counts)  # [W, S_local] rows from each source for each local slot
        splits = [self.slots_per_rank] * self.group.size
        self.group.all_to_all(recv_counts.view(-1), send_counts.flatten(), splits, splits)
        out_splits = recv_counts.sum(1).tolist()
        recv = wire.new_empty(sum(out_splits), wire.shape[1])
        if self.overlap and self.group.size > 1:
            done = []
            t_launch = time.perf_counter()
            work = self.group.all_to_all(recv, wire, out_splits, in_splits, async_op=True)
            work.get_future().then(lambda _: done.append(time.perf_counter()))
            shared = moe.shared(x)  # single-batch overlap: the shared expert runs while tokens fly
            t1 = time.perf_counter()
            work.wait()
            t2 = time.perf_counter()
            c.dispatch_seconds += min(done[0] if done else t2, t2) - t0
            c.dispatch_exposed_seconds += (t_launch - t0) + (t2 - t1)
        else:
            self.group.all_to_all(recv, wire, out_splits, in_splits)
            t2 = time.perf_counter()
            c.dispatch_seconds += t2 - t0
            c.dispatch_exposed_seconds += t2 - t0
            shared = moe.shared(x)

        if self.quantize_dispatch:
            recv = ops.dequantize(*refs.unpack(recv, x.shape[1]), x.dtype)  # [M, D]
        slot_of_row = torch.arange(self.slots_per_rank, device=x.device).repeat(self.group.size)
        slot_of_row = slot_of_row.repeat_interleave(
            recv_counts.flatten()
        )  # [M] local slot of each received row
        by_slot = torch.argsort(slot_of_row, stable=True)  # [M]
        slot_counts = recv_counts.sum(0)  # [S_local]
        c.slot_tokens[layer] += slot_counts
        y = ops.grouped_swiglu(recv[by_slot], slot_counts, self.w13[layer], self.w2[layer])  # [M, D]
        y = ops.unpermute(y, by_slot, y.shape[0])  # back to arrival order

        t3 = time.perf_counter()
        back = x.new_empty(send.shape)
        self.group.all_to_all(back, y, in_splits, out_splits)
        t4 = time.perf_counter()
        c.combine_seconds += t4 - t3
        c.combine_exposed_seconds += t4 - t3
        routed = ops.combine(ops.unpermute(back, order, topk_ids.numel()), weights.to(x.dtype))  # [T, D]
        return shared + routed
