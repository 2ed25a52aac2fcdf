from django.contrib.auth import views as auth_views
from django.http import HttpResponse
from django.urls import include, path

from tests.oidc_provider import views

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("control/user", views.control_user),
    path("control/client", views.control_client),
    path("favicon.ico", lambda request: HttpResponse(status=204)),
]
