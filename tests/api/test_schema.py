"""The OpenAPI schema validates, the docs load no CDN asset, and schemathesis finds no 5xx."""

from __future__ import annotations

import re
import time

import pytest
import yaml
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_schema_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/chargeback/" in schema["paths"]
    assert "bearerAuth" in schema["components"]["securitySchemes"]


def test_the_schema_endpoint_serves_openapi_3():
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def test_the_docs_page_loads_only_local_static_assets():
    html = Client().get("/api/docs/").content.decode()
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    urls += re.findall(r"""["'](https?://[^"']+)["']""", html)
    assert any("swagger-ui" in url for url in urls)
    for url in urls:
        assert url.startswith("/static/") or url in ("/api/schema/", "/api/docs/?script="), url
    assert "cdn" not in html.lower()


def test_the_docs_page_starts_from_a_script_file_that_the_csp_allows():
    """No inline script (the CSP says script-src 'self'): the start-up script is a file."""
    response = Client().get("/api/docs/")
    html = response.content.decode()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S)
    assert scripts
    assert all("src=" in attrs and not body.strip() for attrs, body in scripts)
    assert "script-src 'self'" in response["Content-Security-Policy"]
    start = Client().get("/api/docs/?script=")
    assert start.status_code == 200
    assert start["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in start.content.decode()


@pytest.fixture
def admin_client(cast):
    client = Client()
    client.force_login(cast.root)
    return client


def test_schemathesis_finds_no_server_errors_on_the_read_endpoints(cast, admin_client):
    """Property-based GETs against every path as an admin: no 5xx, responses match the schema."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import checks as st_checks
    from schemathesis.core.failures import FailureGroup
    from schemathesis.specs.openapi.checks import response_schema_conformance

    raw = admin_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    schema = schemathesis.openapi.from_dict(raw).include(method="GET")
    failures: list[str] = []
    started = time.monotonic()

    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(
            max_examples=5,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case):
            django_response = admin_client.generic(
                case.method,
                case.formatted_path,
                QUERY_STRING=_query(case.query),
                HTTP_ACCEPT="application/json",
            )
            if django_response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} {case.query}: 5xx")
            response = _as_schemathesis(django_response, case)
            try:
                case.validate_response(
                    response, checks=[response_schema_conformance, st_checks.not_a_server_error]
                )
            except FailureGroup as e:  # collect every operation's failure, then fail once
                failures.append(f"{case.method} {case.formatted_path} {case.query}: {e}")

        check()
    assert time.monotonic() - started < 60
    assert failures == [], "\n\n".join(failures)


def _query(query) -> str:
    from urllib.parse import urlencode

    return urlencode(query or {}, doseq=True)


def _as_schemathesis(django_response, case):
    """A schemathesis Response carrying the Django test response, for its checks."""
    import requests
    from schemathesis import Response

    request = requests.Request(
        case.method, "http://testserver" + case.formatted_path, params=case.query
    ).prepare()
    return Response(
        status_code=django_response.status_code,
        headers={name: [value] for name, value in django_response.items()},
        content=django_response.content,
        request=request,
        elapsed=0.0,
        message=django_response.reason_phrase,
        encoding="utf-8",
        http_version="1.1",
        verify=True,
    )
