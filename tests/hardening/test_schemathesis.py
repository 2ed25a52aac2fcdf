"""Schemathesis over the whole API (issue 15): reads and writes, positive and negative data, as
an admin and as a lead, against seeded objects so detail operations answer 200, with every
schemathesis check on. No 5xx and no answer the schema does not declare.

Runs on PostgreSQL only (``one_database``: not again in scripts/test.sh's SQLite pass). Its subject
is the HTTP contract (statuses and bodies as the schema declares them), which the serializers and
views make, not the database; hostile values that a database adapter treats differently (10^30 in a
filter, NUL in a string) are sent to every filter and page on both databases by
tests/hardening/test_fuzz.py. No wall-clock limit here beyond a generous timeout against a hang
(it took ~180 s on a loaded 2-core machine; ``pytest --durations`` reports it)."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from tests.hardening.conftest import seeded_path

pytestmark = [pytest.mark.django_db, pytest.mark.one_database]


# ------------------------------------------------------------------ schemathesis


@pytest.fixture
def wsgi_app():
    """Django's WSGI handler, with the test client's trick: no closing of the connection
    between requests (it holds the test's transaction)."""
    from django.core import signals
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


# Every check schemathesis has stays on. One is configured: a request the schema calls valid may
# still break a rule no schema states (a team that must exist and be visible, dates within the
# supported years, capacity, a request's state), and the API answers those 400 (or 409), naming
# the field; schemathesis' default list allows 409 and not 400.
CONFIG = {
    "checks": {
        "positive_data_acceptance": {
            "expected-statuses": ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]
        }
    }
}


def run_operation(operation, mode, *, path, headers, failures, label, statuses):
    from django.db import transaction
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.core.failures import FailureGroup

    @settings(
        max_examples=4,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    # The credentials are fixed at generation, so negative cases never count on a bad token
    # that the request then does not carry.
    @given(case=operation.as_strategy(mode, path_parameters=path or None, headers=headers))
    def check(case):
        cache.clear()  # throttles: every example starts with a full budget
        with transaction.atomic():
            response = case.call()
            statuses.setdefault((case.method, operation.path), set()).add(response.status_code)
            where = f"{label} {mode} {case.method} {case.formatted_path}"
            if response.status_code >= 500:
                failures.append(f"{where}: {response.status_code}")
            try:
                case.validate_response(response)
            except (FailureGroup, AssertionError) as e:
                failures.append(f"{where}: {e}")
            transaction.set_rollback(True)

    try:
        check()
    except Unsatisfiable:
        # Negative data for an operation whose only inputs are fixed (the seeded path, the
        # credentials): there is nothing left to make invalid.
        assert mode == "negative", operation.path


@pytest.mark.timeout(1800)  # only a hang: the run's length depends on the machine's load
@pytest.mark.parametrize("role", ["root", "alice"])
def test_schemathesis_finds_no_server_error_and_no_schema_violation(schema_world, wsgi_app, role):
    """Every operation, reads and writes, positive and negative data, as an admin and as a
    lead, against seeded objects, with every schemathesis check: no 5xx, every answer as the
    schema declares it. Each example runs in a rolled-back savepoint."""
    import schemathesis
    from schemathesis.config import SchemathesisConfig
    from schemathesis.generation.modes import GenerationMode

    world = schema_world
    schema = schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", wsgi_app, config=SchemathesisConfig.from_dict(CONFIG)
    )
    headers = {"Authorization": f"Bearer {world.role_raw[role]}"}
    failures: list[str] = []
    statuses: dict[tuple[str, str], set[int]] = {}
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run_operation(
                operation,
                mode,
                path=seeded_path(operation, world, role),
                headers=headers,
                failures=failures,
                label=role,
                statuses=statuses,
            )
    assert operations > 60  # every operation of the API, writes included
    # The seeded objects make every detail read answer 200 (for the lead: the ones she may see).
    admin_only = (
        "/service-tokens/",
        "/sync-runs/",
        "/sync-items/",
        "/group-rules/",
        "/cluster-groups/",
    )
    unopened = [
        path
        for (method, path), seen in statuses.items()
        if method == "GET"
        and "{" in path
        and 200 not in seen
        and not (role == "alice" and path.startswith(tuple(f"/api/v1{p}" for p in admin_only)))
    ]
    assert unopened == []
    assert any(200 <= s < 300 for (m, _), seen in statuses.items() if m != "GET" for s in seen)
    assert failures == [], "\n\n".join(failures[:40]) + f"\n\n({len(failures)} failures)"
