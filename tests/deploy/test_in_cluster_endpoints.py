"""config/security.py's InClusterEndpointsMiddleware: which Host values count as "the pod by
its IP" (the kubelet and Prometheus), and that nothing else is exempt from ALLOWED_HOSTS."""

from __future__ import annotations

import pytest

from config.security import is_ip_host


@pytest.mark.parametrize(
    "host", ["10.244.3.17", "10.244.3.17:8000", "[fd00::17]", "[fd00::17]:8000", "127.0.0.1"]
)
def test_an_ip_literal_host_is_the_pod_by_ip(host):
    assert is_ip_host(host)


@pytest.mark.parametrize(
    "host",
    [
        "",
        "fairshare.example.com",
        "10.244.3.17.nip.io",
        "10.244.3.17:http",
        "10.244.3.17:80:80",
        "fd00::17",  # IPv6 in a Host header is always bracketed
        "[fd00::17]x",
        "[fd00::17",
        "999.1.1.1",
        "localhost:8000",
    ],
)
def test_anything_else_is_not(host):
    assert not is_ip_host(host)


@pytest.mark.django_db
def test_the_exempt_answers_carry_no_cache_and_a_head_works(client, settings):
    settings.ALLOWED_HOSTS = ["fairshare.example.com"]
    answer = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert answer.status_code == 200
    assert "no-store" in answer["Cache-Control"]
    assert client.head("/readyz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    # A path that merely starts like an exempt one is not exempt.
    assert client.get("/healthz/x", HTTP_HOST="10.1.2.3:8000").status_code == 400
    assert client.get("/metrics/", HTTP_HOST="10.1.2.3:8000").status_code == 400
