"""Error pages in the product's layout; JSON errors under /api/; no debug page by default."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

from config import errors
from tests.base import PASSWORD


def _boom(request):
    raise RuntimeError("kaboom: secret detail")


def _denied(request):
    from django.core.exceptions import PermissionDenied

    raise PermissionDenied


def _bad(request):
    from django.core.exceptions import SuspiciousOperation

    raise SuspiciousOperation("hostile")


# A URLconf of the real one plus views that fail, to see the handlers at work.
from config.urls import urlpatterns as _real  # noqa: E402

urlpatterns = [
    path("test-boom/", _boom),
    path("api/v1/test-boom/", _boom),
    path("test-denied/", _denied),
    path("test-bad/", _bad),
    *_real,
]
handler400 = errors.bad_request
handler403 = errors.permission_denied
handler404 = errors.page_not_found
handler500 = errors.server_error


@pytest.fixture
def failing_urls(settings):
    settings.ROOT_URLCONF = __name__
    settings.DEBUG = False


def _signed_in(cast) -> Client:
    client = Client(raise_request_exception=False)
    assert client.login(username="alice", password=PASSWORD)
    return client


@pytest.mark.parametrize(
    ("url", "status", "heading"),
    [
        ("/test-bad/", 400, "Bad request"),
        ("/test-denied/", 403, "Not allowed"),
        ("/no-such-page/", 404, "Not found"),
        ("/test-boom/", 500, "Something went wrong"),
    ],
)
def test_error_pages_use_the_layout_with_navigation(cast, failing_urls, url, status, heading):
    response = _signed_in(cast).get(url)

    assert response.status_code == status
    html = response.content.decode()
    assert f'<h1 id="error-h">{heading}</h1>' in html
    assert 'aria-label="Main"' in html  # the navigation of a signed-in user
    assert "Traceback" not in html and "kaboom" not in html and "URLconf" not in html


def test_a_404_never_lists_url_patterns_and_the_signed_out_page_offers_sign_in(db, failing_urls):
    html = Client().get("/teams/nope/at/all/").content.decode()
    assert "Sign in" in html
    assert "api/v1/" not in html  # Django's debug 404 lists every pattern


def test_api_errors_answer_in_the_api_error_shape(cast, failing_urls):
    client = _signed_in(cast)
    missing = client.get("/api/v1/no-such-endpoint/")
    assert missing.status_code == 404
    assert missing.json() == {"errors": {"detail": ["Not found."]}}
    failed = client.get("/api/v1/test-boom/")
    assert failed.status_code == 500
    assert "kaboom" not in failed.content.decode()
    assert list(failed.json()["errors"]) == ["detail"]


def test_the_500_page_falls_back_to_a_plain_page_when_the_layout_fails(rf, monkeypatch):
    def broken(*args, **kwargs):
        if kwargs.get("request") is not None:
            raise RuntimeError("database down")
        return real(*args, **kwargs)

    real = errors.loader.render_to_string
    monkeypatch.setattr(errors.loader, "render_to_string", broken)
    response = errors.server_error(rf.get("/teams/"))

    assert response.status_code == 500
    assert b"Something went wrong" in response.content


def test_a_csrf_failure_is_a_403_page_in_the_layout(cast):
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="alice", password=PASSWORD)
    response = client.post("/teams/team-a/requests/new/", {})

    assert response.status_code == 403
    html = response.content.decode()
    assert "The form expired" in html and 'aria-label="Main"' in html


def test_the_favicon_is_served_for_pages_that_name_none(db):
    response = Client().get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("img/favicon.svg")
    assert Client().get(response["Location"]).status_code == 200


def test_a_get_on_a_post_only_page_is_a_405_page_in_the_layout(cast):
    client = _signed_in(cast)
    response = client.get("/sync/start/", HTTP_ACCEPT="text/html,application/xhtml+xml")

    assert response.status_code == 405
    assert response["Allow"] == "POST"
    html = response.content.decode()
    assert '<h1 id="error-h">Not possible here</h1>' in html
    assert 'aria-label="Main"' in html  # the site layout, navigation included
    assert "takes POST only" in html and "Nothing was changed" in html


def test_a_405_from_a_page_with_several_methods_names_them(cast):
    response = _signed_in(cast).delete("/tokens/", HTTP_ACCEPT="text/html")

    assert response.status_code == 405
    assert "it takes GET, POST" in response.content.decode()


def test_a_405_for_a_client_that_takes_no_html_stays_empty(cast):
    response = _signed_in(cast).get("/sync/start/", HTTP_ACCEPT="application/json")

    assert response.status_code == 405 and response.content == b""


def test_the_api_keeps_its_json_405(cast):
    client = _signed_in(cast)
    response = client.delete("/api/v1/tokens/", HTTP_ACCEPT="text/html,application/json")

    assert response.status_code == 405
    assert response["Content-Type"].startswith("application/json")
    assert "Not possible here" not in response.content.decode()
