"""Every knob the controller changes, by the kind its actions and requests carry."""

from __future__ import annotations

from controlplane.actuate.knob import Knob
from controlplane.actuate.placement import PLACEMENT
from controlplane.actuate.pool_size import POOL_SIZE
from controlplane.actuate.prefill_threshold import PREFILL_THRESHOLD
from controlplane.actuate.routing import ROUTING

KNOBS: dict[str, Knob] = {knob.kind: knob for knob in (PLACEMENT, ROUTING, POOL_SIZE, PREFILL_THRESHOLD)}
