"""Property-based tests of the whole HTTP API from its own OpenAPI schema (schemathesis): generated
requests, valid and not, with an admin token, never get a 5xx or an answer that breaks the schema."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from support.auth import operator  # noqa: E402

MODEL = {"name": "tiny", "num_layers": 2, "num_experts": 8, "num_groups": 2, "top_k": 2}
MAX_EXAMPLES = 25  # per operation: bounded, so CI time stays small
# every check but "schema-valid data is accepted": cross-field rules (experts divisible by groups, min <= max)
# are not expressible in JSON Schema, so some schema-valid bodies rightly get a 422
CHECKS = [schemathesis.checks.not_a_server_error, schemathesis.checks.status_code_conformance,
          schemathesis.checks.content_type_conformance, schemathesis.checks.response_schema_conformance,
          schemathesis.checks.response_headers_conformance, schemathesis.checks.negative_data_rejection]


@pytest.mark.slow
def test_no_5xx_and_answers_match_the_schema(client):
    # something to find: a registered deployment, so reads reach past their 404s
    client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator())
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            case.call_and_validate(headers=operator(), checks=CHECKS)

        check()
