"""The OpenAPI schema validates and the docs load no CDN asset (schemathesis runs in
tests/hardening/test_schemathesis.py)."""

from __future__ import annotations

import re

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
        assert url.startswith("/static/") or url == "/api/schema/", url
    assert "cdn" not in html.lower()
