from collections import deque

from agents.runtime.block_manager import BlockManager
from agents.runtime.config import EngineConfig
from agents.runtime.sequence import Sequence, SequenceStatus


class Scheduler:
    """Continuous batching: admit waiting prompts when they fit, else decode the running ones."""

    def __init__(self, cfg: EngineConfig, block_manager: BlockManager):
        self.max_num_seqs = cfg.max_num_seqs
        self.max_num_batched_tokens = cfg.max_num_batched_tokens
        self.num_reserved_tokens = 2 * cfg.num_speculative_tokens  # drafts verified now and drafted next
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> tuple[list[Sequence], bool, int]:
        scheduled, num_tokens = [], 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.block_manager.can_allocate(seq, self.num_reserved_tokens):
                break
            if scheduled and num_tokens + len(seq) > self.max_num_batched_tokens:
                break
            self.block_manager.allocate(seq, self.num_reserved_tokens)
            num_tokens += len(seq) - seq.num_cached_tokens
            seq.status = SequenceStatus.RUNNING
            self.running.append(self.waiting.popleft())
            scheduled.append(seq)
        if scheduled:
            return scheduled, True, 0
        num_preempted = 0
        while self.running and len(scheduled) < self.max_num_seqs:
            seq = self.running.popleft()
            while not self.block_manager.can_append(seq, self.num_reserved_tokens):
                num_preempted += 1
                if self.running:
                    self.preempt(self.running.pop())
                else:
                    self.preempt(seq)
                    break
            else:
                self.block_manager.may_append(seq, self.num_reserved_tokens)
                scheduled.append(seq)
        self.running.extendleft(reversed(scheduled))
        return scheduled, False, num_preempted

    def preempt(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        seq.draft_token_ids = []
        self.block_manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.FINISHED
        self.block_manager.deallocate(seq)
        self.running.remove(seq)
