"""The scale benchmark's fleet (benchmarks/scale.py): a DeepSeek-V3-shaped fleet of simulated instances and each
window's posts as bytes, ready to send."""

from __future__ import annotations

WINDOW_SECONDS = 5.0
MARK = 1234567.0  # window_start in the body templates, replaced per window


class Fleet:
    """The simulated DeepSeek-V3 fleet (agents/sim/fleet.py) and one window of its posts per instance, as bytes
    templates split at window_start, rebuilt only when an instance applies a new placement (its slot load
    moves): the load generator spends its CPU on sending, not on building bodies."""

    def __init__(self, num_gpus: int, protocol: str, *, seed: int = 0):
        from agents.sim.fleet import deepseek_fleet

        self.instances, self.protocol = deepseek_fleet(num_gpus, seed=seed), protocol
        self.path = "/v1/agents/snapshot" if protocol == "v1" else "/v2/agents/snapshot"
        self.templates = [self._templates(instance) for instance in self.instances]

    @property
    def num_ranks(self) -> int:
        return sum(i.ep_size for i in self.instances)

    def _templates(self, instance) -> list[tuple[bytes, bytes]]:  # noqa: ANN001
        bodies = [s.model_dump_json() for s in instance.window(MARK, WINDOW_SECONDS)] if self.protocol == "v1" \
            else [instance.group_window(MARK, WINDOW_SECONDS).model_dump_json()]
        return [_template(body) for body in bodies]

    def render(self, window_start: float) -> list[tuple[int, bytes]]:
        """(instance index, body) for every post of the window."""
        value = repr(float(window_start)).encode()
        return [(i, head + value + tail) for i, parts in enumerate(self.templates) for head, tail in parts]

    def apply(self, answers: dict[int, bytes]) -> int:
        """Each instance applies its first answer, as its ranks do; returns how many switched placement."""
        from agents.protocol import DesiredState

        num_switched = 0
        for i, body in answers.items():
            instance, answer = self.instances[i], DesiredState.model_validate_json(body)
            if answer.placement_version != instance.placement_version and answer.slot_to_expert is not None:
                instance.apply(answer)
                self.templates[i] = self._templates(instance)
                num_switched += 1
        return num_switched


def _template(body: str) -> tuple[bytes, bytes]:
    needle = f'"window_start":{MARK!r}'
    head, tail = body.split(needle)
    return (head + '"window_start":').encode(), tail.encode()
