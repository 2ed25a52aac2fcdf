"""Liveness and readiness probes for Kubernetes."""

from django.db import connection
from django.http import JsonResponse


def healthz(request):
    return JsonResponse({"status": "ok"})


def readyz(request):
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as e:
        return JsonResponse({"status": "unavailable", "database": str(e)[:200]}, status=503)
    return JsonResponse({"status": "ok", "database": "ok"})
