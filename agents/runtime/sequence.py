from dataclasses import dataclass
from enum import Enum, auto


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    max_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if self.temperature < 0 or self.max_tokens < 1:
            raise ValueError("temperature must be >= 0 and max_tokens >= 1")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


class Sequence:
    def __init__(self, request_id: str, token_ids: list[int], params: SamplingParams, arrival_time: float):
        if not token_ids:
            raise ValueError("a request needs at least one prompt token")
        self.request_id = request_id
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.params = params
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at the last allocation
        self.num_computed_tokens = 0  # tokens whose KV is in the cache
        self.draft_token_ids: list[int] = []
        self.num_returned_tokens = 0  # completion tokens already handed out in outputs
        self.finish_reason: str | None = None
        self.arrival_time = arrival_time
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def num_blocks(self, block_size: int, extra_tokens: int = 0) -> int:
        return (len(self) + extra_tokens + block_size - 1) // block_size

    def append(self, token_id: int) -> bool:
        self.token_ids.append(token_id)
        if token_id in self.params.stop_token_ids:
            self.finish_reason = "stop"
        elif self.num_output_tokens >= self.params.max_tokens:
            self.finish_reason = "length"
        return self.finish_reason is not None
