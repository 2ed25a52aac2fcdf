import pytest

from tests.base import make_cast

pytest_plugins = ["tests.kubeapi.fixtures"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # Hashing with PBKDF2's 1M iterations would dominate the suite's run time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def cast(db):
    return make_cast()


@pytest.fixture(autouse=True)
def _sync_lock_per_worker(settings, worker_id):
    """The sync lock's Redis key names the database (scheduling.sync.flight.lock_key); every xdist
    worker's in-memory SQLite test database has the same name, so give each worker its own."""
    from django.db import connection

    if connection.vendor == "sqlite":
        settings.FAIRSHARE_SYNC_LOCK_KEY = f"fairshare:sync-lock:tests-{worker_id}"


@pytest.fixture(autouse=True)
def _previews_unbounded(settings):
    """The preview allowance (portal.previews.preview_allowance) counts per user id a minute in
    the cache, which outlives a test: ids repeat across tests, so bound previews only where a
    test means to (tests/hardening/test_third_probe.py)."""
    settings.FAIRSHARE_PREVIEW_RATE_PER_MINUTE = 10**6
    settings.FAIRSHARE_PREVIEW_CONCURRENCY = 10**6


# ---------------------------------------------------------------- the second (SQLite) pass
# scripts/test.sh runs the suite on PostgreSQL, then again on SQLite with
# FAIRSHARE_TEST_PASS=sqlite: the second pass exists to show that every query gives the same
# results on the embedded database, so it runs only the tests that reach a database (a db
# fixture in their closure or a django_db marker; django_db_blocker is in every closure, so it
# says nothing) and that are not marked one_database (their subject is not SQL: see the marker in
# pyproject.toml). Everything else ran in the first pass and would prove nothing new.
DATABASE_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "live_server"})


def reaches_the_database(item: pytest.Item) -> bool:
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))) or (
        item.get_closest_marker("django_db") is not None
    )


@pytest.hookimpl(trylast=True)  # after -m "not browser": the counts are of what would run
def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("FAIRSHARE_TEST_PASS") != "sqlite":
        return
    kept, dropped = [], []
    for item in items:
        once = item.get_closest_marker("one_database") is not None
        (dropped if once or not reaches_the_database(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    # pytest-xdist's summary leaves deselected tests out: scripts/test.sh prints this line.
    report = os.environ.get("FAIRSHARE_TEST_PASS_REPORT")
    if report and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        with open(report, "w") as out:
            out.write(f"{len(kept)} selected, {len(dropped)} deselected (no database, or")
            out.write(" one_database)\n")
