"""Pytest plugin: the ``kubeapi`` fixture (register with ``pytest_plugins``).

One fake API server runs per test session (per xdist worker); every test that asks for ``kubeapi``
gets it reset to a fresh state: the default namespaces only, no faults, zero counters.

    def test_it_creates_the_queue(kubeapi):
        api = CustomObjectsApi(kubeapi.api_client())
        ...
        assert kubeapi.counts[("create", "Queue")] == 1
        assert kubeapi.get("Queue", "team-a")["spec"]["weight"] == 3
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .server import FakeKubeApi


@pytest.fixture(scope="session")
def kubeapi_server() -> Iterator[FakeKubeApi]:
    server = FakeKubeApi().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def kubeapi(kubeapi_server: FakeKubeApi) -> Iterator[FakeKubeApi]:
    kubeapi_server.reset()
    try:
        yield kubeapi_server
    finally:
        kubeapi_server.clear_faults()
        kubeapi_server.close_clients()
