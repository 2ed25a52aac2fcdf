"""The OpenAPI schema validates and the docs load no CDN asset (schemathesis runs in
tests/hardening/test_schemathesis.py).

PostgreSQL only (``one_database``: not again in scripts/test.sh's SQLite pass): the schema is
generated from the serializers and views, and what is nullable from the models' fields; the
database only stores the rows whose answers are compared with it."""

from __future__ import annotations

import re

import pytest
import yaml
from django.core.management import call_command
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.one_database]


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


@pytest.mark.parametrize(
    ("component", "field"),
    [
        ("AuditEvent", "team"),
        ("QuotaRequest", "decided_by"),
        ("SyncRun", "requested_by"),
        ("UsageRollup", "team"),
        ("UsageSample", "team"),
        ("GpuSample", "team"),
        ("ChargebackStatement", "frozen_by"),
        ("Team", "parent"),
    ],
)
def test_fields_the_api_returns_as_null_are_declared_nullable(tmp_path, component, field):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(out))
    schema = yaml.safe_load(out.read_text())["components"]["schemas"]
    assert schema[component]["properties"][field].get("nullable") is True


def test_every_operation_declares_its_error_answers(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(out))
    for path, item in yaml.safe_load(out.read_text())["paths"].items():
        for method, operation in item.items():
            codes = set(operation["responses"])
            assert {"400", "401", "403", "404", "429"} <= codes, (method, path)
            if method in ("post", "put", "patch", "delete"):
                assert {"409", "413", "415"} <= codes, (method, path)
