"""The tests' control door into the provider (loopback only, a per-run bearer token): create or
change a user and their groups, register a client. It plays the identity provider's admin."""

import json
import os
import secrets

from django.contrib.auth.models import Group, User
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.models import Application


def _authorized(request) -> bool:
    expected = f"Bearer {os.environ['PROVIDER_CONTROL_TOKEN']}"
    return secrets.compare_digest(request.headers.get("Authorization", ""), expected)


@csrf_exempt
@require_POST
def control_user(request):
    if not _authorized(request):
        return HttpResponse(status=403)
    body = json.loads(request.body)
    user, _ = User.objects.get_or_create(username=body["username"])
    user.email = body.get("email", f"{user.username}@example.test")
    user.first_name = body.get("first_name", "")
    if "password" in body:
        user.set_password(body["password"])
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in body["groups"]])
    return JsonResponse({"sub": str(user.pk)})


@csrf_exempt
@require_POST
def control_client(request):
    if not _authorized(request):
        return HttpResponse(status=403)
    body = json.loads(request.body)
    Application.objects.filter(client_id=body["client_id"]).delete()
    Application.objects.create(
        client_id=body["client_id"],
        client_secret=body["client_secret"],
        name=body.get("name", body["client_id"]),
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(body["redirect_uris"]),
        post_logout_redirect_uris=" ".join(body.get("post_logout_redirect_uris", [])),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )
    return JsonResponse({"client_id": body["client_id"]})
