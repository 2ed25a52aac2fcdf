"""The REST API's policies that know the apps: the exception handler and the throttles.

Every 4xx has the one error shape of ``config.api`` (``{"errors": {field: [messages]}}``). The
apps' domain errors are mapped here, once:

==========================================  ======  ==========================================
``quotas.exceptions.InvalidTransition``     409     ``detail``
``quotas.exceptions.QuotaExceeded``         400     the resource name (``nvidia.com/gpu``)
``quotas.exceptions.PermissionDenied``      403     ``detail``
``django.core.exceptions.ValidationError``  400     its fields (``__all__`` becomes ``detail``)
``monitoring...chargeback.ChargebackError`` 400     ``detail``
any other app's ``DomainError``             409     ``detail``
==========================================  ======  ==========================================

The throttles key a request per service or node-agent token when one authenticates
(``quotas.api.authentication``), else per user or client address. Settings name both
(``REST_FRAMEWORK``); ``config.api`` holds the plumbing that imports no app.
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle, UserRateThrottle

from config.api import DETAIL, error_body, flatten_errors
from config.net import client_ip
from kube.errors import DomainError as KubeDomainError
from monitoring.domain.chargeback import ChargebackError
from monitoring.exceptions import DomainError as MonitoringDomainError
from quotas import exceptions as quota_errors
from scheduling.exceptions import DomainError as SchedulingDomainError

logger = logging.getLogger(__name__)


def _domain_response(exc: Exception) -> Response | None:
    if isinstance(exc, quota_errors.QuotaExceeded):
        return Response(error_body({exc.resource: [str(exc)]}), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, quota_errors.InvalidTransition):
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, quota_errors.PermissionDenied):
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, DjangoValidationError):
        data = exc.message_dict if hasattr(exc, "error_dict") else {DETAIL: exc.messages}
        return Response(error_body(flatten_errors(data)), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ChargebackError):
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(
        exc,
        quota_errors.DomainError | MonitoringDomainError | SchedulingDomainError | KubeDomainError,
    ):
        # A state the request cannot be applied to (e.g. a sync already running).
        return Response(error_body({DETAIL: [str(exc)]}), status=status.HTTP_409_CONFLICT)
    return None


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """REST framework exception handler: domain errors mapped once, every 4xx in one shape."""
    response = _domain_response(exc)
    if response is None:
        # Imported here: rest_framework.views reads the throttle classes defined in this module.
        from rest_framework.views import exception_handler as drf_exception_handler

        response = drf_exception_handler(exc, context)
        if response is None:
            return None  # a real bug: let Django answer 500 and log it
        response.data = error_body(flatten_errors(response.data))
    else:
        view = context.get("view")
        logger.info("%s on %s: %s", type(exc).__name__, type(view).__name__, exc)
    return response


def _ident(throttle, request) -> str:
    from quotas.api.authentication import token_of

    token = token_of(request)
    if token is not None and token.kind != token.Kind.PERSONAL:
        return f"token-{token.pk}"
    # A personal token acts as its user and spends the user's budget: more tokens, no more
    # requests (issue 27).
    if request.user and request.user.is_authenticated:
        return f"user-{request.user.pk}"
    # Not REST framework's get_ident: it believes any X-Forwarded-For the client sends.
    return f"ip-{client_ip(request)}"


class UserOrTokenRateThrottle(UserRateThrottle):
    """UserRateThrottle, keyed per service or node-agent token when one authenticates (each its
    own budget), else per user (personal tokens included) or client address."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": _ident(self, request)}


class ScopedUserOrTokenRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle for views with ``throttle_scope``, keyed like UserOrTokenRateThrottle."""

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": _ident(self, request)}
