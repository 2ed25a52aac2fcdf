"""Liveness and readiness probes for Kubernetes.

Both are public (the kubelet signs in to nothing), so they say whether the database answers and
nothing about it: the error (host, port, role) goes to the log (issue 27).
"""

import logging

from django.db import connection
from django.http import JsonResponse

logger = logging.getLogger(__name__)


def healthz(request):
    return JsonResponse({"status": "ok"})


def readyz(request):
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        logger.exception("readiness: the database does not answer")
        return JsonResponse({"status": "unavailable", "database": "unavailable"}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})
