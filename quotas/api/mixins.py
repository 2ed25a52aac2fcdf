"""ViewSet mixins shared by the apps' APIs."""

from __future__ import annotations

from django.db import transaction
from django.forms.models import model_to_dict

from quotas.changes import audit
from quotas.choices import AuditVerb


def _state(instance) -> dict:
    """JSON-ready field values for the audit trail."""
    plain = bool | int | float | str | dict | list | type(None)
    return {k: (v if isinstance(v, plain) else str(v)) for k, v in model_to_dict(instance).items()}


class WarningsMixin:
    """Notices about a write's consequences go back as ``Warning: 299 - "..."`` headers, as the
    Kubernetes API server sends its own warnings (RFC 7234's warn-code 299)."""

    def initial(self, request, *args, **kwargs):
        self.notices: list[str] = []
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        notices = [n for n in getattr(self, "notices", []) if n]
        if notices and response.status_code < 300:
            response["Warning"] = ", ".join(
                '299 - "{}"'.format(n.replace("\\", "\\\\").replace('"', '\\"')) for n in notices
            )
        return response


class AuditedWriteMixin:
    """Create/update/delete through ``full_clean()`` and one AuditEvent, in one transaction.

    For simple models without a service of their own (teams, namespaces, tiers, budgets, rate
    cards): REST framework does not call ``Model.clean()``, so this does. ``check_write(instance)``
    is the hook for object-level write rules (raise quotas.exceptions.PermissionDenied).
    """

    def audit_team(self, instance):
        return getattr(instance, "team", None)

    def check_write(self, instance) -> None:
        """Raise PermissionDenied if the user may not write ``instance`` (default: allowed)."""

    def after_write(self, instance, before: dict | None) -> None:
        """Hook run inside the transaction after saving."""

    def perform_create(self, serializer):
        model = serializer.Meta.model
        instance = model(**serializer.validated_data)
        self.check_write(instance)
        with transaction.atomic():
            instance.full_clean()
            instance.save()
            audit(
                actor=self.request.user,
                verb=AuditVerb.CREATE,
                obj=instance,
                team=self.audit_team(instance),
                after=_state(instance),
            )
            self.after_write(instance, None)
        serializer.instance = instance

    def perform_update(self, serializer):
        instance = serializer.instance
        self.check_write(instance)
        before = _state(instance)
        for name, value in serializer.validated_data.items():
            setattr(instance, name, value)
        self.check_write(instance)
        with transaction.atomic():
            instance.full_clean()
            instance.save()
            audit(
                actor=self.request.user,
                verb=AuditVerb.UPDATE,
                obj=instance,
                team=self.audit_team(instance),
                before=before,
                after=_state(instance),
            )
            self.after_write(instance, before)

    def perform_destroy(self, instance):
        self.check_write(instance)
        before = _state(instance)
        with transaction.atomic():
            audit(
                actor=self.request.user,
                verb=AuditVerb.DELETE,
                obj=instance,
                team=self.audit_team(instance),
                before=before,
            )
            instance.delete()
