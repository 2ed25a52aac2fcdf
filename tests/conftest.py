import pytest

from tests.base import make_cast

pytest_plugins = []


@pytest.fixture
def cast(db):
    return make_cast()
