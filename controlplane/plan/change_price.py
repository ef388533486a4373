"""What a placement change is worth against what it costs: pay, or keep the placement in force. Pure.

Worth: the step time the planned placement saves over the one in force, from the pool's step time against its
imbalance (`StepModel`: each MoE layer waits for its busiest GPU, so a step is a fixed part plus a part that scales
with max/mean; agents/sim/cost.py is the model the benchmarks time with), over the time the gain holds. The gain
holds while the hot experts stay hot: controlplane/learn/persistence.py says how many windows of its full size it is
worth up to a planning limit (the decay of the skew's autocorrelation, measured on the window history).
Cost: the seconds of the pool's capacity a change takes (a synchronous rearrange's stall, a group's restart), per
engine: measured per deployment once the agents report it, until then `ENGINE_PRIORS`
(docs/reference/loop.md, "What a change costs", gives the figures they come from).
Both are in seconds of the pool's capacity at the rate the planned placement runs at; a change is made when the
gain is at least `margin` x the cost. The engine's and the policy's rails stay outer bounds
(controlplane/plan/engines.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.learn.persistence import gain_held_windows, persistence_windows

DEFAULT_MARGIN = 1.25  # the forecast's and the step model's errors: a change must beat its cost by a quarter
MAX_HORIZON_SECONDS = 3600.0  # nothing is planned for past an hour: the load and the policy move on
# the share of a step that scales with the busiest GPU, when the pool's windows have not spread its imbalance
# enough to measure it: the benchmarks' step model at prefill EP32 (agents/sim/cost.py), ~0.3
DEFAULT_MOE_SHARE = 0.3
MIN_IMBALANCE_SPREAD = 0.02  # max/mean the windows must span for the slope to be fitted, not assumed
MIN_BATCH_SPREAD = 0.1  # the share of its mean the batch must span for the step to be fitted against it too
GAIN_WINDOWS = 12  # the last windows (a minute of 5 s ones) a plan's gain is measured on


@dataclass(frozen=True)
class ChangeCost:
    """What one change takes of a pool: `stall_seconds` of its whole capacity (no step runs), and where that
    number comes from (`source`: "prior: ..." or "measured: ...")."""

    stall_seconds: float
    source: str


# per engine, until a deployment's own changes are measured (docs/reference/loop.md, "What a change costs")
ENGINE_PRIORS: dict[str, ChangeCost] = {
    "vllm": ChangeCost(0.91, "prior: vLLM's synchronous EPLB rearrange, 0.65-1.70 s, mean 0.91 s on 32 GB200s"),
    "sglang": ChangeCost(180.0, "prior: an SGLang group restart (--init-expert-location): weights reload, KV cache "
                                "lost, minutes"),
    # a bundled switch moves nothing between ranks: each rank gathers its slots' rows from the weights it holds
    # (agents/runtime/ep.py `apply_placement`), timed as the ranks time it by benchmarks/bundled_switch.py
    "bundled": ChangeCost(0.01, "prior: the bundled runtime's switch at moectl up's shape, median 0.010 s a rank on "
                                "a 2-core x86_64 CPU (benchmarks/bundled_switch.py: each rank gathers its 80 slots' "
                                "3.75 MiB from its own copy, none across ranks)"),
}


@dataclass(frozen=True)
class StepModel:
    """A step's seconds against the pool's max/mean GPU load: fixed_seconds + seconds_per_imbalance x max/mean."""

    fixed_seconds: float
    seconds_per_imbalance: float

    def seconds(self, imbalance: float) -> float:
        return self.fixed_seconds + self.seconds_per_imbalance * imbalance


def fit_step_model(imbalances, step_seconds, tokens_per_step=None, moe_share: float = DEFAULT_MOE_SHARE) -> StepModel:
    """The pool's step model from its windows: imbalances [n] (max/mean), step_seconds [n] (mean step) and, where
    known, tokens_per_step [n] (token-expert assignments a step routes, in any fixed unit).

    A busier window has longer steps and, with more tokens to spread, a lower max/mean: fitted on max/mean alone its
    slope comes out negative on a pool whose load moves (benchmarks/results/up-changes-2026-12-06.md, run 2). So
    where the batch moves by `MIN_BATCH_SPREAD` the step is fitted as a + b x tokens + c x tokens x max/mean (the
    busiest GPU's share of the batch is what a MoE layer waits for) and read at the windows' mean batch; else as a
    line in max/mean. The slope is non-negative, and fitted only when the windows span `MIN_IMBALANCE_SPREAD` of
    max/mean; otherwise their mean step with `moe_share` of it scaling with max/mean (nothing to fit)."""
    x, y = np.asarray(imbalances, dtype=np.float64), np.asarray(step_seconds, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"imbalances and step_seconds must be finite [n] of one length, got {x.shape}, {y.shape}")
    t = None if tokens_per_step is None else np.asarray(tokens_per_step, dtype=np.float64)
    if t is not None and (t.shape != x.shape or not np.isfinite(t).all() or (t <= 0).any()):
        raise ValueError(f"tokens_per_step must be positive and finite, one per window, got {t}")
    assumed_slope = moe_share * float(y.mean()) / float(x.mean())
    assumed = StepModel(float(y.mean()) - assumed_slope * float(x.mean()), assumed_slope)
    if float(x.max() - x.min()) < MIN_IMBALANCE_SPREAD:
        return assumed
    if t is None or float(t.max() - t.min()) < MIN_BATCH_SPREAD * float(t.mean()):
        slope = max(float(np.polyfit(x, y, 1)[0]), 0.0)
        return StepModel(float(y.mean() - slope * x.mean()), slope)
    batch = float(t.mean())
    (a, b, c), *_ = np.linalg.lstsq(np.stack([np.ones_like(t), t, t * x], axis=1), y, rcond=None)
    if c < 0:  # a busier GPU never shortens the step: refit the batch alone
        (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(t), t], axis=1), y, rcond=None)
        c = 0.0
    fitted = StepModel(float(a + b * batch), float(c * batch))
    mean_step = fitted.seconds(float(x.mean()))
    if mean_step <= 0:  # a fit that says a step takes no time: nothing was learned
        return assumed
    if fitted.fixed_seconds < 0:  # at most the whole step waits on the busiest GPU: a steeper fit is its noise
        return StepModel(0.0, mean_step / float(x.mean()))
    return fitted


@dataclass(frozen=True)
class ChangeQuote:
    """A planned change's inputs to its price: max/mean in force and planned (the plan's forecast), the pool's
    step model, how long the gain holds (seconds at its full size: persistence_windows x the window), what one
    change costs and the margin."""

    current_imbalance: float
    planned_imbalance: float
    step: StepModel
    horizon_seconds: float
    cost: ChangeCost
    margin: float = DEFAULT_MARGIN


@dataclass(frozen=True)
class Price:
    """The verdict with its numbers, as an action records them. gain_share: the step time the change saves, as a
    share of the planned step; horizon_seconds: how long that gain is worth at its full size; gain_seconds and
    cost_seconds: the pool's capacity gained over the horizon and lost to the change."""

    is_paying: bool
    gain_share: float
    horizon_seconds: float
    gain_seconds: float
    cost_seconds: float
    cost_source: str
    margin: float
    reason: str
    step: StepModel | None = None  # the pool's step model it was priced with (the verdict restates the gain on it)

    def to_json(self) -> dict:
        step = {} if self.step is None else {"step_fixed_seconds": self.step.fixed_seconds,
                                             "step_seconds_per_imbalance": self.step.seconds_per_imbalance}
        return {"is_paying": self.is_paying, "gain_share": round(self.gain_share, 5),
                "horizon_seconds": round(self.horizon_seconds, 1), "gain_seconds": round(self.gain_seconds, 4),
                "cost_seconds": round(self.cost_seconds, 4), "cost_source": self.cost_source, "margin": self.margin,
                "reason": self.reason} | step


def price_change(quote: ChangeQuote) -> Price:
    """Pay (make the change) when the capacity it gains over its horizon is at least margin x what it costs."""
    now, planned = quote.step.seconds(quote.current_imbalance), quote.step.seconds(quote.planned_imbalance)
    if not (now > 0 and planned > 0):
        raise ValueError(f"the step model gives {now} s now and {planned} s planned: it must be positive")
    gain_share = now / planned - 1.0  # more steps per second at the planned placement
    horizon = max(quote.horizon_seconds, 0.0)
    gain = gain_share * horizon
    cost = quote.cost.stall_seconds
    is_paying = gain > 0 and gain >= quote.margin * cost
    verdict = ">=" if is_paying else "<"
    # three significant figures: a bundled switch costs hundredths of a second (ENGINE_PRIORS)
    # the imbalances and the step model in the reason too: a pass held at no gain says whether the tables do not
    # differ on the load or the pool's step does not wait on its busiest GPU (a fitted slope of 0)
    reason = (f"gains {gain_share:.2%} of the step (max/mean {quote.current_imbalance:.3f} -> "
              f"{quote.planned_imbalance:.3f}, step {quote.step.fixed_seconds:.3g}s + "
              f"{quote.step.seconds_per_imbalance:.3g}s x max/mean) for ~{horizon:.0f}s = {gain:.3g}s of capacity "
              f"{verdict} {quote.margin:g} x the change's {cost:.3g}s ({quote.cost.source})")
    return Price(is_paying, gain_share, horizon, gain, cost, quote.cost.source, quote.margin, reason, quote.step)


def price_placement(current: PlacementTable, planned: PlacementTable, history, imbalances, step_seconds,
                    cost: ChangeCost, window_seconds: float, num_gpus: int, margin: float = DEFAULT_MARGIN,
                    tokens_per_step=None) -> Price:
    """The price of switching the pool from `current` to `planned`, from what its windows carry.

    history: [W, L, E] expert tokens per window, oldest first; imbalances, step_seconds: [n] each window's measured
    max/mean and mean step seconds; tokens_per_step: [n] their batch, None where not known (fit_step_model).
    Before and after are the mean max/mean of the last GAIN_WINDOWS windows had each
    table run them: a plan is fitted to the load it was solved on, so its gain there is optimistic, and on a minute
    of measured windows a plan that chases a passing hot set gains nothing. The horizon is the shorter of the hot
    set's persistence on the history (up to MAX_HORIZON_SECONDS) and how long this gain has held back over the
    history (controlplane/learn/persistence.py: a gain that appeared a minute ago is expected to last about a
    minute more; the history's length bounds what is believed)."""
    history = np.asarray(history, dtype=np.float64)
    before_each = np.array([current.imbalance(x, num_gpus) for x in history])
    after_each = np.array([planned.imbalance(x, num_gpus) for x in history])
    before, after = float(before_each[-GAIN_WINDOWS:].mean()), float(after_each[-GAIN_WINDOWS:].mean())
    # the gain as a minute's mean, window by window back over the history: how long it has held
    gains = np.convolve(before_each - after_each, np.ones(GAIN_WINDOWS) / GAIN_WINDOWS, mode="valid")
    persistence = min(persistence_windows(history, MAX_HORIZON_SECONDS / window_seconds),
                      max(gain_held_windows(gains), 1.0))
    step = fit_step_model(imbalances, step_seconds, tokens_per_step)
    return price_change(ChangeQuote(before, after, step, window_seconds * persistence, cost, margin))
