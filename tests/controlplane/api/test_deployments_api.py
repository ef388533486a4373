"""Registering deployments, reading them, and changing their policy."""

from __future__ import annotations

import pytest
from support.auth import operator

MODEL = {"name": "tiny", "num_layers": 2, "num_experts": 8, "num_groups": 2, "top_k": 2}


def test_register_is_idempotent_and_the_shape_cannot_change(client):
    assert client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator()).json()["created"]
    assert not client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator()).json()["created"]
    other = client.put("/v1/deployments/tiny", json={"model": MODEL | {"num_experts": 16}}, headers=operator())
    assert other.status_code == 409 and "another model shape" in other.json()["detail"]
    assert client.get("/v1/deployments/tiny/overview").json()["model"]["num_experts"] == 8


def test_changes_need_an_operator_token(client):
    assert client.put("/v1/deployments/tiny", json={"model": MODEL}).status_code == 401
    assert client.put("/v1/deployments/tiny", json={"model": MODEL},
                      headers={"Authorization": "Bearer test-agent-token"}).status_code == 403
    assert client.get("/v1/deployments").json() == []


def test_invalid_input_names_the_field(client):
    bad_name = client.put("/v1/deployments/Bad_Name", json={"model": MODEL}, headers=operator())
    assert bad_name.status_code == 422
    assert bad_name.json()["detail"].startswith("path.name: String should match pattern")
    bad_model = client.put("/v1/deployments/tiny", json={"model": MODEL | {"num_groups": 3}}, headers=operator())
    assert bad_model.status_code == 422 and "not a multiple of num_groups" in bad_model.json()["detail"]
    client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator())
    bad_policy = client.put("/v1/deployments/tiny/policy", json={"mode": "auto", "imbalance_threshold": 0.5},
                            headers=operator())
    assert bad_policy.status_code == 422 and "imbalance_threshold" in bad_policy.json()["detail"]
    unknown = client.put("/v1/deployments/tiny/policy", json={"mode": "sometimes"}, headers=operator())
    assert unknown.status_code == 422 and "mode" in unknown.json()["detail"]
    assert client.get("/v1/deployments/tiny/policy").json()["version"] == 1


def test_policy_changes_are_versioned(client):
    client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator())
    assert client.get("/v1/deployments/tiny/policy").json()["policy"]["mode"] == "observe"
    changed = client.put("/v1/deployments/tiny/policy", json={"mode": "auto"}, headers=operator()).json()
    assert changed["version"] == 2
    current = client.get("/v1/deployments/tiny/policy").json()
    assert current["version"] == 2 and current["policy"]["mode"] == "auto"
    assert client.get("/v1/deployments/tiny/overview").json()["mode"] == "auto"


def test_overview_of_a_quiet_deployment_says_unknown_not_zero(client):
    client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator())
    overview = client.get("/v1/deployments/tiny/overview").json()
    assert overview["imbalance"] is None and overview["mtp_acceptance"] is None
    assert overview["agents"] == {"total": 0, "fresh": 0, "stale": 0, "gone": 0, "unhealthy": []}
    assert client.get("/v1/deployments/nope/overview").status_code == 404


def test_pool_load_matrices_for_the_dashboard(client, sessions, settings, clock):
    from support.fleet import run_windows, start_fleet

    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 4)
    load = client.get("/v1/deployments/sim-0/pools/decode/load").json()
    assert len(load["expert_tokens"]) == 8 and len(load["expert_tokens"][0]) == 64
    assert len(load["gpu_tokens"][0]) == 8 and len(load["slot_to_expert"][0]) == 80
    assert load["placement_version"] >= 1 and load["previous_slot_to_expert"] != load["slot_to_expert"]
    # every routed token lands on some GPU: the two views of one window agree
    assert abs(sum(map(sum, load["gpu_tokens"])) - sum(map(sum, load["expert_tokens"]))) < 0.01 * sum(
        map(sum, load["expert_tokens"]))
    assert client.get("/v1/deployments/sim-0/pools/prefill/load").status_code == 404


@pytest.mark.parametrize("slots, is_limited", [((40, 1), True), ((8, 5), False)])
def test_the_overview_and_status_say_when_a_pools_shape_is_the_limit(client, sessions, settings, clock, slots,
                                                                     is_limited):
    from support.fleet import CPU, run_windows, start_fleet

    from controlplane.cmd.status import render

    # 40 slots for 32 skewed experts: one per GPU, as in DeepSeek's decode pool, or five per GPU
    ep_size, slots_per_rank = slots
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0},
                        **(CPU | {"ep_size": ep_size, "slots_per_rank": slots_per_rank}))
    overview = run_windows(client, sessions, settings, clock, fleet, 6)[-1]  # past the placement switch's window
    pool = overview["pools"][0]
    assert pool["imbalance"] >= pool["imbalance_floor"] - 0.01  # what it measured, no placement beats
    assert f"{pool['imbalance_floor']:.2f}" in render([overview]).splitlines()[1]
    reasons = [a["reason"] for a in client.get("/v1/deployments/sim-0/actions").json()]
    assert reasons
    if is_limited:
        assert pool["imbalance_floor"] > 1.5
        assert all("the pool's shape is the limit: no placement of its 40 slots on 40 GPUs gets under" in r
                   for r in reasons)
    else:
        assert pool["imbalance_floor"] < 1.1 and not any("shape" in r for r in reasons)


def test_concurrent_registration_is_idempotent(settings, sessions):
    """Every rank of a new instance may register at once: one creates, the others see it (no 500)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from support.servers import free_port

    from controlplane.cmd.serve import Controller

    controller = Controller(settings.model_copy(update={"port": free_port()}), run_loop=False)
    controller.start()
    try:
        def register(_):
            return httpx.put(f"{controller.url}/v1/deployments/raced", json={"model": MODEL}, headers=operator(),
                             timeout=30)

        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(register, range(16)))
        assert [r.status_code for r in responses] == [200] * 16, [r.text for r in responses if r.status_code != 200]
        assert sum(r.json()["created"] for r in responses) == 1
    finally:
        controller.stop()


def test_mtp_acceptance_by_draft_position(client, sessions, settings, clock):
    from support.fleet import run_windows, start_fleet

    fleet = start_fleet(client, {"mode": "observe"})
    overview = run_windows(client, sessions, settings, clock, fleet, 3)[-1]
    first, second = overview["mtp_acceptance_by_position"]
    # the simulator accepts position 0 with p=0.85 and position 1 with p=0.7 given position 0, each times the
    # routing's quality (agents/sim/reach.py: a sampled share, just under 1 here)
    assert 0.8 < first < 0.87 and abs(second / first - 0.7) < 0.03
    assert abs(overview["mtp_acceptance"] - (first + second) / 2) < 1e-3
