"""Named workloads for the load model (agents/sim/load.py): calibrated ones, set so placements and the
dispatch-time split gain what public measurements of DeepSeek-V3/R1 serving report, and the stress cases the
closed-loop benchmark was first run on, named as such.

Calibration (benchmarks/results/replica-split-2026-12-03.md re-measures each against the simulator):

1. SGLang + NVIDIA, "Improving DeepEP MoE Load Balance in SGLang with Waterfill and LPLB" (lmsys.org blog,
   2026-06-26; DeepSeek-V3 FP8, 2 x 8 Hopper, EP16, DeepEP normal mode, MMLU / GPQA / GSM8K prompt pools).
   Static EPLB over no EPLB: +4.9% / +13.5% / +11.5% throughput with no redundant experts, +6.0% / +12.0% / +14.6%
   with 32. LPLB (a per-batch split of replicated experts) over static EPLB: +1.5% / +0.9% / +4.3% with 16
   redundant experts and +2.7% / +0.8% / +7.3% with 32.
2. SGLang, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs"
   (lmsys.org blog, 2025-05-05): prefill EP32, 16,384 tokens per GPU. It measured 50,302 tok/s per node with the
   real expert distribution against 59,337 with "simulated perfect EPLB" (random experts). So the real skew costs
   ~15% of throughput after EPLB.
3. "Scaling Multi-Node Mixture-of-Experts Inference Using Expert Activation Patterns" (arXiv 2604.23150): DeepSeek-V3
   traces show expert popularity shifting between task families (code, math, chat), which the mix swing models.

`SERVING` takes per-layer Zipf exponents in [0.2, 0.5] and a per-step lognormal factor of 0.2. In the step-time
model (agents/sim/cost.py) at that EP16 shape it gives EPLB over no EPLB +12% (no redundant experts) and +15%
(32). It gives the split over static EPLB +3.9% (16) and +5.8% (32), inside the blog's ranges. The exponents of the
stress cases (0.9-1.3) put static placement at 2.5-25x instead. No public source states DeepSeek's per-layer
exponent or its per-step dispersion directly: both are fitted to the throughput figures above, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600.0


@dataclass(frozen=True)
class Workload:
    """How the load looks and drifts: the walk's step per window, the period of the swing between two kinds of text
    (None: one kind), the range of per-layer Zipf exponents, and the per-step dispersion (LoadModel's fields)."""

    name: str
    drift_sigma: float
    swing_period_seconds: float | None
    min_exponent: float = 0.9
    max_exponent: float = 1.3
    step_sigma: float = 0.0
    is_stress: bool = False

    def load_kwargs(self) -> dict:
        """LoadModel's keyword arguments for this workload."""
        return dict(drift_sigma=self.drift_sigma, swing_period_seconds=self.swing_period_seconds,
                    min_exponent=self.min_exponent, max_exponent=self.max_exponent, step_sigma=self.step_sigma)


SERVING = Workload("serving (calibrated)", drift_sigma=0.02, swing_period_seconds=None, min_exponent=0.2,
                   max_exponent=0.5, step_sigma=0.2)
SERVING_MIX = Workload("serving, task mix shifts over 1 h (calibrated)", drift_sigma=0.02, swing_period_seconds=HOUR,
                       min_exponent=0.2, max_exponent=0.5, step_sigma=0.2)
CALIBRATED = [SERVING, SERVING_MIX]
# the closed loop's first workloads (benchmarks/results/closed-loop-2026-11-30.md): hotter than any published
# deployment, kept to test the loop under skew and drift it should never meet
STRESS = [
    Workload("stress: slow drift", drift_sigma=0.02, swing_period_seconds=None, is_stress=True),
    Workload("stress: swing code/prose, 1 h period", drift_sigma=0.01, swing_period_seconds=HOUR, is_stress=True),
    Workload("stress: fast drift + 20 min swing", drift_sigma=0.04, swing_period_seconds=HOUR / 3, is_stress=True),
]
WORKLOADS = [*CALIBRATED, *STRESS]
