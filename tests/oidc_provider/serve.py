"""Run the test provider: ``python -m tests.oidc_provider.serve`` with PROVIDER_PORT,
PROVIDER_DB, PROVIDER_KEY and PROVIDER_CONTROL_TOKEN set (the ``oidc_provider`` fixture does).

Writes a fresh RSA key, migrates a fresh SQLite database, then serves on 127.0.0.1 (threaded,
so the relying party's back-channel token request is answered while the browser waits).
"""

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def main() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    Path(os.environ["PROVIDER_KEY"]).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.core.servers.basehttp import run
    from django.core.wsgi import get_wsgi_application

    call_command("migrate", verbosity=0, interactive=False)
    run("127.0.0.1", int(os.environ["PROVIDER_PORT"]), get_wsgi_application(), threading=True)


if __name__ == "__main__":
    main()
