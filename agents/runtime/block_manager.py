from collections import OrderedDict

from agents.runtime.sequence import Sequence


class Block:
    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash = -1
        self.token_ids: tuple[int, ...] = ()

    def reset(self) -> None:
        self.ref_count, self.hash, self.token_ids = 1, -1, ()


class BlockManager:
    """Paged KV blocks with hash-chained prefix caching; freed blocks keep their hash until reused (LRU)."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block_id: dict[int, int] = {}
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # LRU first
        self.num_query_tokens = 0
        self.num_hit_tokens = 0

    @staticmethod
    def compute_hash(token_ids: tuple[int, ...], parent_hash: int) -> int:
        return hash((parent_hash, token_ids))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / len(self.blocks)

    def _allocate_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash != -1 and self.hash_to_block_id.get(block.hash) == block_id:
            del self.hash_to_block_id[block.hash]  # evict its cached prefix
        block.reset()
        return block_id

    def _match(self, seq: Sequence) -> list[int]:
        hits, parent = [], -1
        for i in range((len(seq) - 1) // self.block_size):  # the last token is always computed
            tokens = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
            parent = self.compute_hash(tokens, parent)
            block_id = self.hash_to_block_id.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
        return hits

    def can_allocate(self, seq: Sequence, extra_tokens: int = 0) -> bool:
        hits = self._match(seq)
        num_free_hits = sum(1 for b in hits if b in self.free_block_ids)
        return self.num_free_blocks - num_free_hits >= seq.num_blocks(self.block_size, extra_tokens) - len(
            hits
        )

    def allocate(self, seq: Sequence, extra_tokens: int = 0) -> None:
        hits = self._match(seq)
        for block_id in hits:
            if block_id in self.free_block_ids:
                del self.free_block_ids[block_id]
            self.blocks[block_id].ref_count += 1
        seq.block_table = hits + [
            self._allocate_block() for _ in range(seq.num_blocks(self.block_size, extra_tokens) - len(hits))
        ]
        seq.num_cached_tokens = seq.num_computed_tokens = len(hits) * self.block_size
        self.num_query_tokens += len(seq)
        self.num_hit_tokens += seq.num_cached_tokens

    def deallocate(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):  # chain tails are evicted first
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_computed_tokens = seq.num_cached_tokens = 0

    def can_append(self, seq: Sequence, extra_tokens: int) -> bool:
        return self.num_free_blocks >= seq.num_blocks(self.block_size, extra_tokens) - len(seq.block_table)

    def may_append(self, seq: Sequence, extra_tokens: int) -> None:
        while len(seq.block_table) < seq.num_blocks(self.block_size, extra_tokens):
            seq.block_table.append(self._allocate_block())

    def cache_full_blocks(self, seq: Sequence) -> None:
        parent = -1
        for i in range(seq.num_computed_tokens // self.block_size):
            block = self.blocks[seq.block_table[i]]
            if block.hash == -1:
                block.token_ids = tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])
                block.hash = self.compute_hash(block.token_ids, parent)
                self.hash_to_block_id.setdefault(block.hash, block.block_id)
            parent = block.hash
