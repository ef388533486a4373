"""The router's admin API against real workers (in-process engines): who may call it, the 4xx it answers
with, and drain: a draining instance gets no new request, keeps serving the ones it has, and cannot be
removed while one is in flight."""

from __future__ import annotations

import threading

import httpx
import pytest
from support.serving import router, worker

TOKEN = "router-admin-test"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROMPT = "def parse(path):\n    with open(path) as f:\n"


@pytest.fixture(scope="module")
def stack():
    with worker("prefill") as (prefill_url, _, _), worker("decode", "tiny-decode-a") as (a_url, _, _), \
            worker("decode", "tiny-decode-b") as (b_url, _, _), router([], admin_token=TOKEN) as (url, r):
        yield {"url": url, "router": r, "prefill": prefill_url, "a": a_url, "b": b_url}


def admin(stack, method: str, path: str = "", **kwargs) -> httpx.Response:
    headers = kwargs.pop("headers", AUTH)
    return httpx.request(method, f"{stack['url']}/admin/instances{path}", headers=headers, timeout=30, **kwargs)


def complete(stack, tag: str = "") -> httpx.Response:
    """A short completion; `tag` starts its prompt, so the router remembers new prompt blocks where it goes."""
    return httpx.post(f"{stack['url']}/v1/completions", json={"prompt": f"# {tag:<14}\n" + PROMPT, "max_tokens": 4},
                      timeout=60)


def test_the_admin_api_needs_the_token(stack):
    assert admin(stack, "GET", headers={}).status_code == 401
    wrong = admin(stack, "GET", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "wrong admin token" in wrong.text
    assert admin(stack, "GET", headers={"Authorization": "Basic x"}).status_code == 401
    with router([]) as (url, _):  # no admin token configured: the API is off
        off = httpx.get(f"{url}/admin/instances", headers=AUTH)
        assert off.status_code == 403 and "--admin-token" in off.text


def test_bad_requests_name_the_problem(stack):
    bad_role = admin(stack, "POST", json={"name": "x", "role": "encode", "urls": [stack["a"]]})
    assert bad_role.status_code == 422 and "role" in bad_role.text
    bad_url = admin(stack, "POST", json={"name": "x", "role": "decode", "urls": ["127.0.0.1:1"]})
    assert bad_url.status_code == 422 and "is not an http(s) URL" in bad_url.text
    assert admin(stack, "POST", json={"name": "x y", "role": "decode", "urls": [stack["a"]]}).status_code == 422
    unknown = admin(stack, "POST", "/nobody/drain")
    assert unknown.status_code == 404 and "no instance 'nobody'" in unknown.text
    assert admin(stack, "DELETE", "/nobody").status_code == 404
    assert admin(stack, "GET").json() == []  # nothing refused was kept


def test_instances_come_and_go_and_drain_first(stack):
    added = admin(stack, "POST", json={"name": "tiny-prefill-0", "role": "prefill", "urls": [stack["prefill"]]})
    assert added.status_code == 200 and added.json()["state"] == "serving"
    a_body = {"name": "tiny-decode-a", "role": "decode", "urls": [stack["a"]]}
    assert admin(stack, "POST", json=a_body).status_code == 200
    again = admin(stack, "POST", json=a_body)
    assert again.status_code == 200  # the same again: nothing changes
    moved = admin(stack, "POST", json={"name": "tiny-decode-a", "role": "decode", "urls": [stack["b"]]})
    assert moved.status_code == 409 and "already registered" in moved.text
    clash = admin(stack, "POST", json={"name": "other", "role": "decode", "urls": [stack["a"]]})
    assert clash.status_code == 409 and "already belongs to instance 'tiny-decode-a'" in clash.text
    assert complete(stack).status_code == 200
    b_body = {"name": "tiny-decode-b", "role": "decode", "urls": [stack["b"]]}
    assert admin(stack, "POST", json=b_body).status_code == 200

    # a long request on a: it stays in flight while a drains
    first_chunk, finish = threading.Event(), threading.Event()
    outcome = {}

    def long_request() -> None:
        with httpx.stream("POST", f"{stack['url']}/v1/completions", timeout=120,
                          json={"prompt": PROMPT, "max_tokens": 200, "stream": True}) as response:
            outcome["status"] = response.status_code
            chunks = response.iter_lines()
            next(chunks)
            first_chunk.set()
            finish.wait(60)
            outcome["body"] = "".join(chunks)

    a = next(e for e in stack["router"].endpoints if e.instance == "tiny-decode-a")
    b = next(e for e in stack["router"].endpoints if e.instance == "tiny-decode-b")
    b.is_draining = True  # pin the long request on a
    thread = threading.Thread(target=long_request)
    thread.start()
    assert first_chunk.wait(60)
    b.is_draining = False
    drained = admin(stack, "POST", "/tiny-decode-a/drain")
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    assert drained.json()["num_in_flight"] == 1
    refused = admin(stack, "DELETE", "/tiny-decode-a")
    assert refused.status_code == 409 and "1 request(s) in flight" in refused.text

    before_a, before_b = len(a.blocks), len(b.blocks)
    for i in range(3):  # new requests all go to b while a drains
        assert complete(stack, f"while-draining-{i}").status_code == 200
    assert a.num_in_flight == 1 and len(a.blocks) == before_a and len(b.blocks) >= before_b + 3

    finish.set()
    thread.join(60)
    assert outcome["status"] == 200 and "[DONE]" in outcome["body"]  # the drained instance finished its request
    listed = {i["name"]: i for i in admin(stack, "GET").json()}
    assert listed["tiny-decode-a"]["num_in_flight"] == 0 and listed["tiny-decode-a"]["state"] == "draining"
    removed = admin(stack, "DELETE", "/tiny-decode-a")
    assert removed.status_code == 200
    assert [i["name"] for i in admin(stack, "GET").json()] == ["tiny-prefill-0", "tiny-decode-b"]
    assert complete(stack).status_code == 200
    # the last decode instance drained: nothing left to serve from, said plainly
    assert admin(stack, "POST", "/tiny-decode-b/drain").status_code == 200
    none = complete(stack)
    assert none.status_code == 503 and "no decode or unified instance is serving" in none.text
