import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

CHECKPOINT_DIR = Path(__file__).parent / "checkpoint"
RENAMED_KEYS = {"topk": "top_k"}
DISPATCH_SPLITS = ("off", "measure", "on")  # old config.json key -> ModelConfig field


@dataclass(slots=True)
class ModelConfig:
    vocab_size: int = 256
    dim: int = 128
    num_layers: int = 4
    num_dense_layers: int = 1
    num_heads: int = 4
    dense_inter: int = 384
    shared_inter: int = 128
    moe_inter: int = 32
    num_experts: int = 32
    num_groups: int = 4
    top_k: int = 4
    topk_group: int = 2
    route_scale: float = 2.5
    num_mtp_layers: int = 1
    max_seq_len: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self):
        if self.dim % self.num_heads:
            raise ValueError("dim must be divisible by num_heads")
        if self.num_experts % self.num_groups:
            raise ValueError("num_experts must be divisible by num_groups")
        if not 1 <= self.topk_group <= self.num_groups:
            raise ValueError("topk_group must be in [1, num_groups]")
        if self.top_k > self.topk_group * self.num_experts // self.num_groups:
            raise ValueError("top_k exceeds the experts in topk_group groups")
        if not 0 <= self.num_dense_layers <= self.num_layers:
            raise ValueError("num_dense_layers must be in [0, num_layers]")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers + self.num_mtp_layers

    @property
    def experts_per_group(self) -> int:
        return self.num_experts // self.num_groups

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        names = {f.name for f in fields(cls)}
        d = {RENAMED_KEYS.get(k, k): v for k, v in d.items()}  # checkpoints written before a rename still load
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def load(cls, path: str | Path) -> "ModelConfig":
        return cls.from_dict(json.loads(Path(path).read_text())["model"])

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class EngineConfig:
    checkpoint: str = str(CHECKPOINT_DIR)
    device: str = "cpu"
    block_size: int = 16
    num_kv_blocks: int = 512
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    num_speculative_tokens: int = 0
    ep_size: int = 1
    ep_rank: int = 0
    slots_per_rank: int = 0  # 0: one slot per expert
    gpus_per_node: int = 8  # ranks per node (nodes own consecutive ranks): what "nodes a token reached" counts
    overlap_shared_expert: bool = True
    quantize_dispatch: bool = False  # int8 rows on the dispatch all-to-all (kernels/refs.py states the error bound)
    # the dispatch-time replica split (agents/runtime/replica_split.py): "off"; "measure" (gather the group's
    # counts each MoE layer and report the split's step-level straggler, route by the fixed shares); "on" (route
    # by it)
    dispatch_split: str = "off"
    seed: int = 0

    def __post_init__(self):
        if not 0 <= self.ep_rank < self.ep_size:
            raise ValueError("ep_rank must be in [0, ep_size)")
        if self.block_size < 1 or self.num_kv_blocks < 1:
            raise ValueError("block_size and num_kv_blocks must be positive")
        if self.gpus_per_node < 1:
            raise ValueError("gpus_per_node must be >= 1")
        if self.num_speculative_tokens < 0:
            raise ValueError("num_speculative_tokens must be >= 0")
        if self.dispatch_split not in DISPATCH_SPLITS:
            raise ValueError(f"dispatch_split must be one of {DISPATCH_SPLITS}, got {self.dispatch_split!r}")
