"""A tiny, real OpenID Connect provider for the single sign-on tests (tests/sso/).

django-oauth-toolkit's OIDC support in its own Django project, started by the ``oidc_provider``
fixture as a separate process on loopback (``serve.py``): its own database, its own RSA key,
its own users and groups. Nothing of Fairshare is imported here.
"""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
PORT = int(os.environ["PROVIDER_PORT"])
ISSUER = f"http://127.0.0.1:{PORT}/o"

DEBUG = False
SECRET_KEY = "oidc-test-provider-not-a-secret"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.oidc_provider.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["PROVIDER_DB"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
# Fairshare's test client and the browser share one host name, so keep the two sessions apart.
SESSION_COOKIE_NAME = "provider_session"
CSRF_COOKIE_NAME = "provider_csrftoken"

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": Path(os.environ["PROVIDER_KEY"]).read_text(),
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
    "PKCE_REQUIRED": True,
    "SCOPES": {
        "openid": "OpenID Connect",
        "profile": "Your name",
        "email": "Your address",
        "groups": "Your groups",
    },
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validators.TestProviderValidator",
}
