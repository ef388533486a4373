"""The HTTP client of a simulated fleet (agents/sim/fleet.py): registers its deployments, posts its windows and
has each instance apply the controller's answer.

Like the real agent, it registers deployments again when the controller no longer knows them, and sends the
table an instance runs when the controller no longer knows its placement version (agents/telemetry/poster.py).
"""

from __future__ import annotations

import logging

import httpx

from agents.protocol import PLACEMENT_UNKNOWN, DesiredState, Snapshot, error_code
from agents.protocol.group import GroupSnapshot
from agents.sim.fleet import SimInstance

log = logging.getLogger("moectl.sim")


class FleetClient:
    """Talks to the controller for a fleet: registers deployments, posts windows, applies answers.
    protocol: "v1" posts a snapshot per rank, "v2" one group snapshot per instance."""

    def __init__(self, client: httpx.Client, *, api_token: str, agent_token: str, protocol: str = "v1"):
        if protocol not in ("v1", "v2"):
            raise ValueError(f"protocol {protocol!r}: v1 (a snapshot per rank) or v2 (one per EP group)")
        self.client, self.api_token, self.agent_token, self.protocol = client, api_token, agent_token, protocol
        self.policies: dict[str, dict | None] = {}  # deployment -> the policy this client registered it with

    def register(self, fleet: list[SimInstance], policy: dict | None = None) -> None:
        for deployment, model in {(i.deployment, i.model) for i in fleet}:
            body = {"model": model.model_dump()} | ({"policy": policy} if policy else {})
            response = self.client.put(f"/v1/deployments/{deployment}", json=body,
                                       headers={"Authorization": f"Bearer {self.api_token}"})
            response.raise_for_status()
            self.policies[deployment] = policy

    def post_window(self, fleet: list[SimInstance], window_start: float, window_seconds: float,
                    num_tokens: int | None = None) -> None:
        """Every rank posts (v1), or every instance once (v2); each instance then applies the answer (all its
        ranks agree on it). num_tokens: per instance (default: its layout's rate)."""
        for instance in fleet:
            if self.protocol == "v2":
                answer = self._post(instance, instance.group_window(window_start, window_seconds, num_tokens))
                answers = [] if answer is None else [answer]
            else:
                answers = [a for s in instance.window(window_start, window_seconds, num_tokens)
                           if (a := self._post(instance, s)) is not None]
            if answers and len({a.placement_version for a in answers}) == 1:
                instance.apply(answers[0])

    def _post(self, instance: SimInstance, snapshot: Snapshot | GroupSnapshot) -> DesiredState | None:
        response = self._send(snapshot)
        if response.status_code == 404 and instance.deployment in self.policies:  # the controller forgot it
            self.register([instance], self.policies[instance.deployment])
            response = self._send(snapshot)
        if response.status_code == 409 and error_code(response.content) == PLACEMENT_UNKNOWN:
            log.warning("%s: the controller never issued placement v%d; sending the table the instance runs",
                        instance.instance, instance.placement_version)
            response = self._send(snapshot.model_copy(update={"running_placement": instance.running_placement()}))
        if response.status_code != 200:
            who = "group" if isinstance(snapshot, GroupSnapshot) else f"rank {snapshot.identity.rank}"
            log.warning("%s %s: %d %s", instance.instance, who, response.status_code, response.text[:200])
            return None
        return DesiredState.model_validate_json(response.content)

    def _send(self, snapshot: Snapshot | GroupSnapshot) -> httpx.Response:
        path = "/v2/agents/snapshot" if isinstance(snapshot, GroupSnapshot) else "/v1/agents/snapshot"
        return self.client.post(path, content=snapshot.model_dump_json(),
                                headers={"Authorization": f"Bearer {self.agent_token}",
                                         "Content-Type": "application/json"})
