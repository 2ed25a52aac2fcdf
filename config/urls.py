from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config import health
from config.auth import ThrottledAdminAuthenticationForm, ThrottledLoginView, admin_login
from portal.views import dashboard
from sso.views import LogoutView

# One sign-in rule for both doors: the admin's login form is throttled like the site's.
admin.site.login_form = ThrottledAdminAuthenticationForm

api_v1 = [
    path("", include("quotas.api.urls")),
    path("", include("scheduling.api.urls")),
    path("", include("monitoring.api.urls")),
]

urlpatterns = [
    path("", dashboard.home, name="home"),
    path(
        "login/",
        ThrottledLoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    # Django's logout, then the identity provider's for a single sign-on session (sso/).
    path("logout/", LogoutView.as_view(), name="logout"),
    path("", include("sso.urls")),
    path("healthz", health.healthz, name="healthz"),
    # Browsers ask for /favicon.ico on pages that name no icon (admin, API docs, errors).
    path(
        "favicon.ico",
        RedirectView.as_view(url=static("img/favicon.svg"), permanent=True),
        name="favicon",
    ),
    path("readyz", health.readyz, name="readyz"),
    # The admin's own login view, answering a throttled attempt with 429 (config/auth.py).
    path("admin/login/", admin_login),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves its start-up script as a file (?script=): no inline script, so the
    # CSP (script-src 'self') holds.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("portal.urls")),
    path("", include("scheduling.urls")),
]

handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"
