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
    """The sync lock's Redis key names the database (scheduling.sync._lock_key); every xdist
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
