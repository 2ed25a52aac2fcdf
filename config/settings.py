"""Fairshare settings: one module, driven by the environment (see config/env.py and README)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_bool,
    env_choice,
    env_cluster,
    env_decimal,
    env_duration,
    env_int,
    env_list,
    env_networks,
    env_own_namespace,
    env_secret,
    env_str,
)
from monitoring.domain.dra import parse_gpu_equivalents

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("FAIRSHARE_VAR_DIR", str(BASE_DIR / "var")))

# ----------------------------------------------------------------------------- Core
DEBUG = env_bool("FAIRSHARE_DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) must be set unless FAIRSHARE_DEBUG=true."
        )
    SECRET_KEY = "django-insecure-fairshare-development-only"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "quotas",
    "scheduling",
    "monitoring",
    "portal",
    "sso",
]

MIDDLEWARE = [
    # Probes and /metrics for callers that address the pod by IP (kubelet, Prometheus); first,
    # before anything asks for the Host. See config/security.py.
    "config.security.InClusterEndpointsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.security.ContentSecurityPolicyMiddleware",
    "config.security.RejectNullCharactersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.security.NoStoreForAuthenticatedMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so it sees the view's own empty 405 (require_POST) with the user and messages set.
    "config.errors.MethodNotAllowedPageMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "config.context.cluster",
                "sso.context.sign_in",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("FAIRSHARE_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "staticfiles")))
WHITENOISE_USE_FINDERS = True  # serve static/ directly too, so a fresh checkout works at once
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# ----------------------------------------------------------------------------- Security
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("FAIRSHARE_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
# With secure cookies (production: not DEBUG) plain HTTP is redirected and HSTS is sent for a
# year unless configured otherwise (issue 27); the probes and the metrics scrape stay on HTTP.
SECURE_SSL_REDIRECT = env_bool("FAIRSHARE_SSL_REDIRECT", SESSION_COOKIE_SECURE)
# Plain HTTP stays for callers inside the cluster: the kubelet's probes, Prometheus's scrape and
# the GPU node agents, which post to the Service (http://fairshare-web.fairshare.svc, deploy/);
# a redirect would send them to the public HTTPS host they cannot reach (the start-up smoke in
# tests/deploy/ posts a batch the way the DaemonSet does).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$", r"^api/v1/gpu-samples/ingest/$"]
SECURE_HSTS_SECONDS = env_int(
    "FAIRSHARE_HSTS_SECONDS", 31_536_000 if SESSION_COOKIE_SECURE else 0, min_value=0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = env_bool("FAIRSHARE_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
CSRF_FAILURE_VIEW = "config.errors.csrf_failure"  # the product's layout, with navigation
ADMINS_GROUP = "admins"
# Sign-in throttling (config/auth.py): back-off per username + client address, per username
# from anywhere, and per client address (an IPv6 client by its /64).
# sso.auth: the throttled password backend, closed to all but superusers when
# FAIRSHARE_LOCAL_PASSWORDS=superusers, and the session backend of single sign-on users.
AUTHENTICATION_BACKENDS = ["sso.auth.LocalPasswordBackend", "sso.auth.SingleSignOnBackend"]
FAIRSHARE_LOGIN_MAX_FAILURES = env_int("FAIRSHARE_LOGIN_MAX_FAILURES", 5, min_value=1)
FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT = env_int(
    "FAIRSHARE_LOGIN_MAX_FAILURES_PER_ACCOUNT", 20, min_value=1
)
FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int(
    "FAIRSHARE_LOGIN_MAX_FAILURES_PER_ADDRESS", 50, min_value=1
)
FAIRSHARE_LOGIN_BACKOFF_SECONDS = env_int("FAIRSHARE_LOGIN_BACKOFF_SECONDS", 30, min_value=1)
FAIRSHARE_LOGIN_BACKOFF_MAX_SECONDS = env_int(
    "FAIRSHARE_LOGIN_BACKOFF_MAX_SECONDS", 900, min_value=1
)
# The client address (config/net.py): REMOTE_ADDR, unless a trusted proxy's header is named.
FAIRSHARE_CLIENT_IP_HEADER = env_str("FAIRSHARE_CLIENT_IP_HEADER", "")
FAIRSHARE_TRUSTED_PROXY_HOPS = env_int("FAIRSHARE_TRUSTED_PROXY_HOPS", 1, min_value=1)
FAIRSHARE_TRUSTED_PROXIES = env_networks("FAIRSHARE_TRUSTED_PROXIES")
# Passwords set in the Django admin (and by createsuperuser/changepassword) must pass these.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": env_int("FAIRSHARE_PASSWORD_MIN_LENGTH", 12, min_value=8)},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# API tokens (quotas/tokens.py): every token expires; created from a session, never a token.
FAIRSHARE_TOKEN_DEFAULT_DAYS = env_int("FAIRSHARE_TOKEN_DEFAULT_DAYS", 90, min_value=1)
FAIRSHARE_TOKEN_MAX_DAYS = env_int("FAIRSHARE_TOKEN_MAX_DAYS", 365, min_value=1)
FAIRSHARE_TOKEN_MAX_PERSONAL = env_int("FAIRSHARE_TOKEN_MAX_PERSONAL", 10, min_value=1)
FAIRSHARE_CSP_REPORT_ONLY = env_bool("FAIRSHARE_CSP_REPORT_ONLY", False)

# ----------------------------------------------------------------------------- Single sign-on
# OpenID Connect (sso/, Authlib): off unless FAIRSHARE_OIDC_ISSUER is set. See docs/operations.md.
FAIRSHARE_OIDC_ISSUER = env_str("FAIRSHARE_OIDC_ISSUER", "").rstrip("/")
if FAIRSHARE_OIDC_ISSUER and not FAIRSHARE_OIDC_ISSUER.startswith(
    ("https://", "http://127.0.0.1:", "http://localhost:", "http://[::1]:")
):
    raise ImproperlyConfigured(
        "FAIRSHARE_OIDC_ISSUER must be an https:// address (http:// only on loopback)."
    )
FAIRSHARE_OIDC_CLIENT_ID = env_str("FAIRSHARE_OIDC_CLIENT_ID", "")
FAIRSHARE_OIDC_CLIENT_SECRET = env_secret("FAIRSHARE_OIDC_CLIENT_SECRET", "") or ""
if FAIRSHARE_OIDC_ISSUER and not (FAIRSHARE_OIDC_CLIENT_ID and FAIRSHARE_OIDC_CLIENT_SECRET):
    raise ImproperlyConfigured(
        "FAIRSHARE_OIDC_ISSUER is set: FAIRSHARE_OIDC_CLIENT_ID and FAIRSHARE_OIDC_CLIENT_SECRET "
        "(or _FILE) must be set too."
    )
FAIRSHARE_OIDC_SCOPES = env_list("FAIRSHARE_OIDC_SCOPES", ["openid", "profile", "email", "groups"])
if FAIRSHARE_OIDC_ISSUER and "openid" not in FAIRSHARE_OIDC_SCOPES:
    raise ImproperlyConfigured("FAIRSHARE_OIDC_SCOPES must include openid.")
FAIRSHARE_OIDC_GROUPS_CLAIM = env_str("FAIRSHARE_OIDC_GROUPS_CLAIM", "groups")
# Members of these identity-provider groups are site admins (so the first admin can arrive).
FAIRSHARE_OIDC_ADMIN_GROUPS = env_list("FAIRSHARE_OIDC_ADMIN_GROUPS", [])
# The claim a new user's username comes from (falls back to the subject).
FAIRSHARE_OIDC_USERNAME_CLAIM = env_str("FAIRSHARE_OIDC_USERNAME_CLAIM", "preferred_username")
# Seconds of clock skew allowed when checking the ID token's exp and iat.
FAIRSHARE_OIDC_LEEWAY_SECONDS = env_int("FAIRSHARE_OIDC_LEEWAY_SECONDS", 60, min_value=0)
FAIRSHARE_OIDC_TIMEOUT = env_int("FAIRSHARE_OIDC_TIMEOUT", 10, min_value=1)
# The kube-apiserver's --oidc-groups-prefix: prepended to the groups a team's RoleBindings bind.
FAIRSHARE_OIDC_GROUP_PREFIX = env_str("FAIRSHARE_OIDC_GROUP_PREFIX", "")
# Who may sign in with a local password: all (default) or superusers (break-glass only).
FAIRSHARE_LOCAL_PASSWORDS = env_choice("FAIRSHARE_LOCAL_PASSWORDS", "all", ["all", "superusers"])

# ----------------------------------------------------------------------------- Database
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'fairshare.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, min_value=0),
        conn_health_checks=True,
    )
}
if env_str("FAIRSHARE_TEST_DATABASE", "") and "sqlite" not in DATABASES["default"]["ENGINE"]:
    # The test database's name (Django's TEST NAME; pytest-xdist appends _gw0, _gw1): two test
    # runs on one PostgreSQL server at once must not share, create and drop the same one.
    DATABASES["default"]["TEST"] = {"NAME": env_str("FAIRSHARE_TEST_DATABASE", "")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Celery worker, beat and the web server share the demo file; wait for locks, don't fail.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
    # Write-ahead log (https://sqlite.org/wal.html): readers never wait for a writer, so a page
    # is not held up while the worker stores a collection or the GPU feed its samples (issue
    # 29: with the default rollback journal, a committing writer locked every reader out).
    # NORMAL is durable across application crashes in WAL mode; only a power cut may lose the
    # last commits. Set on every connection (the mode persists in the file; this is cheap).
    DATABASES["default"]["OPTIONS"]["init_command"] = (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0

# ----------------------------------------------------------------------------- Cache/Redis
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# ----------------------------------------------------------------------------- Celery
# https://docs.celeryq.dev/en/stable/userguide/configuration.html
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "")
if not CELERY_BROKER_URL:
    # Embedded demo transport: kombu's filesystem transport needs no server.
    _queue_dir = VAR_DIR / "celery-queue"
    for _folder in (_queue_dir, VAR_DIR / "celery-processed", VAR_DIR / "celery-control"):
        _folder.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "control_folder": str(VAR_DIR / "celery-control"),
        "processed_folder": str(VAR_DIR / "celery-processed"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_RESULT_BACKEND = (
    env_str(
        "CELERY_RESULT_BACKEND",
        CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "",
    )
    or None
)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the message for another worker
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Django's LOGGING (JSON lines, token redaction) also formats worker logs.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False


def _every(name: str, default_seconds: int) -> timedelta:
    return timedelta(seconds=env_int(name, default_seconds, min_value=5))


CELERY_BEAT_SCHEDULE = {
    "expire-temporary-quota": {
        "task": "quotas.tasks.expire_temporary_quota",
        "schedule": _every("FAIRSHARE_EXPIRE_INTERVAL", 60),
    },
    "remind-ending-grants": {
        "task": "quotas.tasks.remind_ending_grants",
        "schedule": _every("FAIRSHARE_REMINDER_INTERVAL", 3600),
    },
    "collect-usage": {
        "task": "monitoring.tasks.collect_usage",
        "schedule": _every("FAIRSHARE_COLLECT_INTERVAL", 60),
    },
    "compute-shares": {
        "task": "scheduling.tasks.compute_shares",
        "schedule": _every("FAIRSHARE_SHARES_INTERVAL", 300),
    },
    "sync-cluster": {
        "task": "scheduling.tasks.sync_cluster",
        "schedule": _every("FAIRSHARE_SYNC_INTERVAL", 300),
    },
    "advance-transitions": {  # at the collection's pace: it reads the latest workloads
        "task": "scheduling.tasks.advance_transitions",
        "schedule": _every("FAIRSHARE_COLLECT_INTERVAL", 60),
    },
    "rollup-usage": {
        "task": "monitoring.tasks.rollup_usage",
        "schedule": _every("FAIRSHARE_ROLLUP_INTERVAL", 3600),
    },
    "prune-history": {
        "task": "scheduling.tasks.prune_history",
        "schedule": _every("FAIRSHARE_PRUNE_INTERVAL", 86400),
    },
    "check-budgets": {
        "task": "monitoring.tasks.check_budgets",
        "schedule": _every("FAIRSHARE_BUDGET_INTERVAL", 3600),
    },
    "detect-idle-gpus": {
        "task": "monitoring.tasks.detect_idle_gpus",
        "schedule": _every("FAIRSHARE_IDLE_INTERVAL", 300),
    },
}

# ----------------------------------------------------------------------------- REST framework
REST_FRAMEWORK = {
    # Bearer tokens first, so an anonymous request is answered 401 with WWW-Authenticate.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "quotas.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "quotas.api.authentication.TokenKindPolicy",
    ],
    # Bodies are JSON only (415 otherwise): one reading of every field, none of the HTML-form
    # rules (an empty form field means "unchanged" in a PATCH). Bodies over
    # DATA_UPLOAD_MAX_MEMORY_SIZE are refused (413) before parsing, NUL characters (400) after.
    "DEFAULT_PARSER_CLASSES": ["config.api.BoundedJSONParser"],
    # JSON that never fails on a lone surrogate (issue 27), and the browsable API.
    "DEFAULT_RENDERER_CLASSES": [
        "config.api.SurrogateSafeJSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "config.api.StandardPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    # Per user, or per token when a token authenticates (config.api_policy); views with a
    # ``throttle_scope`` (chargeback, ingest) get their own budget as well.
    "DEFAULT_THROTTLE_CLASSES": [
        "config.api_policy.UserOrTokenRateThrottle",
        "config.api_policy.ScopedUserOrTokenRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("FAIRSHARE_API_RATE_USER", "1200/min"),
        "chargeback": env_str("FAIRSHARE_API_RATE_CHARGEBACK", "120/min"),
        "ingest": env_str("FAIRSHARE_API_RATE_INGEST", "240/min"),
    },
    "EXCEPTION_HANDLER": "config.api_policy.exception_handler",
    "NON_FIELD_ERRORS_KEY": "detail",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Fairshare API",
    "DESCRIPTION": "GPU quota, Dominant Resource Fairness shares, usage and chargeback. "
    'Errors always read {"errors": {field: [messages]}} (see docs/api.md).',
    "VERSION": "1.0.0",
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI assets come from drf-spectacular-sidecar (served as static files): no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Error answers (400, 401, 403, 404, ...) declared on every operation (config/schema.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema.declare_errors",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ApiTokenKindEnum": "quotas.models.ApiToken.Kind",
        "ServiceTokenKindEnum": ["service", "node-agent"],
        "SyncActionEnum": "scheduling.choices.SyncAction",
    },
}

# ----------------------------------------------------------------------------- Fairshare domain
# Whose fair-share numbers people see (scheduling/visibility.py): own (default) or all.
# What-if previews (portal.previews.preview_allowance, issue 27): per person a minute, and
# at once over everyone.
FAIRSHARE_PREVIEW_RATE_PER_MINUTE = env_int("FAIRSHARE_PREVIEW_RATE_PER_MINUTE", 30, min_value=1)
FAIRSHARE_PREVIEW_CONCURRENCY = env_int("FAIRSHARE_PREVIEW_CONCURRENCY", 4, min_value=1)
FAIRSHARE_SHARE_VISIBILITY = env_choice("FAIRSHARE_SHARE_VISIBILITY", "own", ["own", "all"])
# May an admin decide their own quota request? strict: never; sole-admin: only when they are
# the only active site admin (audited); off: yes.
FAIRSHARE_SEPARATION_OF_DUTIES = env_choice(
    "FAIRSHARE_SEPARATION_OF_DUTIES", "sole-admin", ["strict", "sole-admin", "off"]
)
# The resources people see in capacity, quota and usage tables (quotas/display.py): others
# (pods, hugepages-*, ephemeral-storage) are hidden, and so are zero amounts.
FAIRSHARE_DISPLAY_RESOURCES = env_list(
    "FAIRSHARE_DISPLAY_RESOURCES", ["nvidia.com/gpu", "cpu", "memory"]
)
FAIRSHARE_CAPACITY_RESERVE = env_decimal(
    "FAIRSHARE_CAPACITY_RESERVE", "0.10", min_value=Decimal(0), max_value=Decimal("0.9")
)
# Where the quota rules read the cluster's capacity (quotas.capacity): a callable returning
# {resource: amount}. quotas itself imports neither scheduling nor monitoring.
FAIRSHARE_CAPACITY_PROVIDER = "monitoring.models.latest_capacity"

# ----------------------------------------------------------------------------- Kubernetes
# kubeconfig[:PATH] | in-cluster | snapshot:PATH (read a `kubectl get nodes,pods -A -o json`
# dump; sync then only plans/exports) | disabled.
FAIRSHARE_CLUSTER = env_cluster(
    "FAIRSHARE_CLUSTER", f"snapshot:{BASE_DIR / 'monitoring' / 'fixtures' / 'demo_cluster.json'}"
)
# The scheduler the cluster runs, and so the objects the sync writes (scheduling.domain.backends):
# volcano (Queues) or kueue (ClusterQueues, Cohorts, LocalQueues, ResourceFlavors).
FAIRSHARE_SCHEDULER = env_choice("FAIRSHARE_SCHEDULER", "volcano", ["volcano", "kueue"])
FAIRSHARE_KUBE_TIMEOUT = env_int("FAIRSHARE_KUBE_TIMEOUT", 30, min_value=1)
FAIRSHARE_SYNC_PRUNE_NAMESPACES = env_bool("FAIRSHARE_SYNC_PRUNE_NAMESPACES", False)
# Namespaces Fairshare never manages, writes into or binds anyone in (glob patterns, comma-
# separated): Kubernetes', Volcano's and Kueue's own and the default namespace, plus the namespace
# Fairshare runs in (FAIRSHARE_NAMESPACE, else POD_NAMESPACE, else the in-cluster service
# account's namespace file). Refused at every entry (quotas.protection) and never rendered.
FAIRSHARE_PROTECTED_NAMESPACES = env_list(
    "FAIRSHARE_PROTECTED_NAMESPACES", ["kube-*", "default", "volcano-*", "kueue-*"]
)
FAIRSHARE_NAMESPACE = env_own_namespace("FAIRSHARE_NAMESPACE", FAIRSHARE_CLUSTER)
# Concurrent writers of a sync: the units of one wave (same kind and Queue depth) go out this
# many at a time (1: one write after another).
FAIRSHARE_SYNC_WORKERS = env_int("FAIRSHARE_SYNC_WORKERS", 8, min_value=1)
FAIRSHARE_SYNC_LOCK_TIMEOUT = env_int("FAIRSHARE_SYNC_LOCK_TIMEOUT", 900, min_value=30)
FAIRSHARE_SYNC_HISTORY_DAYS = env_int("FAIRSHARE_SYNC_HISTORY_DAYS", 14, min_value=1)
FAIRSHARE_SHARE_HISTORY_DAYS = env_int("FAIRSHARE_SHARE_HISTORY_DAYS", 90, min_value=1)
FAIRSHARE_SYNC_STALE_AFTER = env_int("FAIRSHARE_SYNC_STALE_AFTER", 600, min_value=60)
# Fairness over time (issue 32; docs/drf.md "Past use"): the half-life of past use in the fair
# shares (a duration such as 7d; unset or 0: off, today's allocations exactly) and how far it may
# move a team's weight (0 to 0.9: each weight stays within ±strength of its own). An admin can
# override both on the fairness settings page.
FAIRSHARE_USAGE_HALF_LIFE = env_duration("FAIRSHARE_USAGE_HALF_LIFE", "0")
FAIRSHARE_USAGE_STRENGTH = env_decimal(
    "FAIRSHARE_USAGE_STRENGTH", "0.5", min_value=Decimal(0), max_value=Decimal("0.9")
)

# ----------------------------------------------------------------------------- Monitoring
# GPU-equivalents of DRA devices per DeviceClass (issue 34; docs/dra.md), in place of the
# built-in rule (a whole GPU 1, a MIG device its memory slices / 8): CLASS=FRACTION (a fixed
# fraction of a GPU per device, e.g. a time-shared GPU) or CLASS=slices/N (memory slices / N,
# e.g. an A30's 4), comma-separated.
FAIRSHARE_DRA_GPU_EQUIVALENTS_TEXT = env_str("FAIRSHARE_DRA_GPU_EQUIVALENTS", "")
try:
    FAIRSHARE_DRA_GPU_EQUIVALENTS = parse_gpu_equivalents(FAIRSHARE_DRA_GPU_EQUIVALENTS_TEXT)
except ValueError as e:
    raise ImproperlyConfigured(f"FAIRSHARE_DRA_GPU_EQUIVALENTS: {e}") from e
FAIRSHARE_IDLE_GPU_THRESHOLD = env_int(
    "FAIRSHARE_IDLE_GPU_THRESHOLD", 10, min_value=0, max_value=100
)
FAIRSHARE_IDLE_GPU_WINDOW_MINUTES = env_int("FAIRSHARE_IDLE_GPU_WINDOW_MINUTES", 30, min_value=1)
FAIRSHARE_RETENTION_RAW_DAYS = env_int("FAIRSHARE_RETENTION_RAW_DAYS", 14, min_value=1)
FAIRSHARE_RETENTION_HOURLY_DAYS = env_int("FAIRSHARE_RETENTION_HOURLY_DAYS", 400, min_value=1)
# Workload records (one row per gang per collection): keep the newest N collections only.
FAIRSHARE_WORKLOAD_COLLECTIONS = env_int("FAIRSHARE_WORKLOAD_COLLECTIONS", 60, min_value=1)
# Workload records (one row per workload, for waits and run lengths): kept this many days.
FAIRSHARE_WORKLOAD_RECORD_DAYS = env_int("FAIRSHARE_WORKLOAD_RECORD_DAYS", 90, min_value=1)
FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS = env_int(
    "FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS", 15, min_value=1
)
# GPU samples older than this are refused (the agent buffers an hour at its default interval).
FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS = env_int(
    "FAIRSHARE_GPU_SAMPLE_MAX_AGE_SECONDS", 3600, min_value=60
)
# Ingest bounds (monitoring.ingest, monitoring.api.views.IngestSampleThrottle, issue 27):
# samples in one batch, and samples a node-agent token may send a minute.
FAIRSHARE_GPU_INGEST_MAX_BATCH_SAMPLES = env_int(
    "FAIRSHARE_GPU_INGEST_MAX_BATCH_SAMPLES", 512, min_value=1
)
FAIRSHARE_GPU_INGEST_SAMPLES_PER_MINUTE = env_int(
    "FAIRSHARE_GPU_INGEST_SAMPLES_PER_MINUTE", 600, min_value=1
)
FAIRSHARE_METRICS_TOKEN = env_secret("FAIRSHARE_METRICS_TOKEN", "") or ""
# Without the token, /metrics answers loopback requests only where this is on (the default
# where cookies are not secure: the demo, development); production needs the token.
FAIRSHARE_METRICS_LOOPBACK = env_bool("FAIRSHARE_METRICS_LOOPBACK", not SESSION_COOKIE_SECURE)
FAIRSHARE_BUDGET_THRESHOLDS = [
    int(x) for x in env_list("FAIRSHARE_BUDGET_THRESHOLDS", ["80", "100"])
]

# ----------------------------------------------------------------------------- Notifications
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))  # for the file backend
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "fairshare@localhost")
# The address people open Fairshare at: notifications, /metrics and alerts link to pages under it.
FAIRSHARE_BASE_URL = env_str("FAIRSHARE_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
if not FAIRSHARE_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("FAIRSHARE_BASE_URL must be an http:// or https:// address.")
# The team is reminded this many days before a temporary grant ends (0: no reminders).
FAIRSHARE_GRANT_REMINDER_DAYS = env_int("FAIRSHARE_GRANT_REMINDER_DAYS", 2, min_value=0)
# The approval queue highlights requests waiting at least this many days.
FAIRSHARE_APPROVAL_AGE_WARN_DAYS = env_int("FAIRSHARE_APPROVAL_AGE_WARN_DAYS", 3, min_value=1)
FAIRSHARE_WEBHOOK_URL = env_secret("FAIRSHARE_WEBHOOK_URL", "") or ""

# ----------------------------------------------------------------------------- Logging
LOG_LEVEL = env_choice("FAIRSHARE_LOG_LEVEL", "INFO", ["DEBUG", "INFO", "WARNING", "ERROR"])
LOG_FORMAT = env_choice("FAIRSHARE_LOG_FORMAT", "plain" if DEBUG else "json", ["plain", "json"])
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "config.logging.RedactSecretsFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "config.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["redact"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu warns "No hostname was supplied" on every publish; the embedded transport has none.
    LOGGING["loggers"]["kombu.connection"] = {"level": "ERROR"}
