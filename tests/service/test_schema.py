"""Property-based run against the served OpenAPI schema (schemathesis): no input is a 5xx.

Each operation gets a bounded, derandomized set of generated requests, plus the schema's own
examples, which are predicted once before the run (so the examples answer from the cache and
the run stays in seconds). Generated job specs name random models, which the service refuses
cheaply; a generated upload is random bytes, refused by the ONNX reader.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings

from gpucast.service import Settings, create_app


def _examples(spec: dict):
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            media = op.get("requestBody", {}).get("content", {}).get("application/json")
            if media is None:
                continue
            schema = media.get("schema", {})
            ref = schema.get("$ref")
            if ref:
                schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
            for ex in schema.get("examples", []):
                yield method, path, ex


# The schema the app serves, built at collection time (the test checks it equals the served one).
schema = schemathesis.openapi.from_dict(create_app(Settings(data_dir="unused")).openapi())


@pytest.fixture(scope="module")
def warm(server):
    with server.client() as c:
        spec = c.get("/openapi.json").json()
        assert spec == schema.raw_schema
        for method, path, example in _examples(spec):
            r = c.request(method.upper(), path, json=example)
            assert r.status_code == 200, (path, example, r.text)
    return server


@schema.parametrize()
@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
def test_no_input_is_a_server_error(case, warm):
    response = case.call(base_url=warm.url, timeout=60)
    assert response.status_code < 500, f"{case.method} {case.path} -> {response.status_code}: {response.text[:300]}"
    if response.status_code >= 400:
        detail = response.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail, detail
