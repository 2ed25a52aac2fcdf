"""Make the kubeapi fixtures available to these tests until tests/conftest.py registers the plugin.

(``pytest_plugins`` is only allowed in the top-level conftest, so the fixtures are imported.)
"""

from tests.kubeapi.fixtures import kubeapi, kubeapi_server  # noqa: F401
