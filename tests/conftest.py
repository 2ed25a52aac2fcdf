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
