"""The PD-aware local-prefill threshold in force: versioned on a deployment's decode pool
(`knobs.PREFILL_THRESHOLD`). Version 0 (tokens None) means moectl has not set it: the policy's
`local_prefill_threshold` is in force, else the router's own default."""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.desired import Policy
from controlplane.observed.serving import THRESHOLD_ROLE
from controlplane.store.knobs import PREFILL_THRESHOLD
from controlplane.store.tables import Pool
from controlplane.store.versions import Version

ROLE = THRESHOLD_ROLE  # the pool whose instances prefill the short prompts


def in_force(session: Session, decode: Pool | None, policy: Policy) -> int | None:
    """The threshold a deployment's routers and agents are told: moectl's latest on its decode pool (None:
    no decode pool yet), else the policy's."""
    return tokens_in_force(PREFILL_THRESHOLD.versions.latest(session, decode) if decode is not None else None, policy)


def tokens_in_force(newest: Version[int | None] | None, policy: Policy) -> int | None:
    """`in_force` of the decode pool's newest threshold (None: no decode pool yet)."""
    tokens = newest.value if newest is not None else None
    return policy.local_prefill_threshold if tokens is None else tokens
