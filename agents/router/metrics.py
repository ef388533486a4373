"""The router's metrics: what users of the deployment experience, on a registry passed in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agents.router.policy import Endpoint, Route
from agents.telemetry.buckets import ITL_BUCKETS, TTFT_BUCKETS

TRANSFER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.requests = Counter("moectl_router_requests_total", "Requests finished, by outcome", ["outcome"],
                                registry=registry)
        self.routes = Counter("moectl_router_routes_total", "Requests by route: pd (prefill -> decode), local "
                              "(decode prefills a short prompt itself), unified", ["route"], registry=registry)
        self.in_flight = Gauge("moectl_router_requests_in_flight", "Requests the router is serving",
                               registry=registry)
        self.routed_tokens = Counter("moectl_router_routed_prompt_tokens_total", "Prompt tokens sent, by pool role",
                                     ["role"], registry=registry)
        self.generated = Counter("moectl_router_generation_tokens_total", "Tokens returned to clients",
                                 registry=registry)
        self.affinity = Histogram("moectl_router_prefix_affinity_ratio", "Share of the prompt's blocks the "
                                  "chosen rank was sent before", buckets=(0.0, 0.25, 0.5, 0.75, 0.99, 1.0),
                                  registry=registry)
        self.ttft = Histogram("moectl_router_time_to_first_token_seconds", "Request to first token, at the router",
                              buckets=TTFT_BUCKETS, registry=registry)
        self.itl = Histogram("moectl_router_inter_token_latency_seconds", "Between tokens, at the router",
                             buckets=ITL_BUCKETS, registry=registry)
        self.transfer_bytes = Counter("moectl_router_kv_transfer_bytes_total", "KV bytes handed prefill -> decode",
                                      registry=registry)
        self.transfer_seconds = Histogram("moectl_router_kv_transfer_seconds", "Prefill sent to KV received",
                                          buckets=TRANSFER_BUCKETS, registry=registry)
        self.endpoint_load = Gauge("moectl_router_endpoint_queue", "Requests queued or in flight per rank",
                                   ["role", "endpoint"], registry=registry)
        self.endpoint_healthy = Gauge("moectl_router_endpoint_healthy", "1 when the rank answered its last poll",
                                      ["role", "endpoint"], registry=registry)
        for outcome in ("stop", "length", "failed"):
            self.requests.labels(outcome)
        for kind in ("pd", "local", "unified"):
            self.routes.labels(kind)

    def observe_route(self, plan: Route, num_prompt_tokens: int) -> None:
        self.routes.labels(plan.kind).inc()
        self.routed_tokens.labels(plan.prefill.role if plan.prefill else plan.decode.role).inc(num_prompt_tokens)
        self.affinity.observe(plan.affinity)

    def observe_tokens(self, num_before: int, num_new: int, since_start: float, since_last: float) -> None:
        if num_before == 0:
            self.ttft.observe(since_start)
        elif num_new:
            self.itl.observe(since_last / num_new)
        self.generated.inc(num_new)

    def observe_transfer(self, num_bytes: int, seconds: float) -> None:
        self.transfer_bytes.inc(num_bytes)
        self.transfer_seconds.observe(seconds)

    def finish(self, finish_reason: str | None) -> None:
        self.in_flight.dec()
        self.requests.labels(finish_reason if finish_reason in ("stop", "length") else "failed").inc()

    def set_endpoints(self, endpoints: list[Endpoint]) -> None:
        for e in endpoints:
            self.endpoint_load.labels(e.role, e.url).set(e.num_in_flight + e.num_waiting)
            self.endpoint_healthy.labels(e.role, e.url).set(int(e.is_healthy))
