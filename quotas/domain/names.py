"""The rules every name a person types must pass before it reaches the cluster (pure).

One definition shared by the entry points (models' validation, the services, the API, the UI,
the Django admin, the management commands) and by the renderer, so a name that is accepted at
entry is a name the renderer renders and the cluster admits, and the other way round.

Where each rule comes from:

* DNS-1123 label (``IsDNS1123Label`` in Kubernetes ``staging/src/k8s.io/apimachinery/pkg/util/
  validation/validation.go``): namespace names, and every name we also use as a label value
  (a team's slug is the value of ``fairshare.io/team``, a tier's name of ``fairshare.io/tier``;
  label values are at most 63 characters, ``IsValidLabelValue``).
* Volcano's reserved queues: the scheduler creates ``root`` and ``default`` itself and its queue
  webhook (``pkg/webhooks/admission/queues/validate/validate_queue.go``,
  ``validateQueueDeleting``) protects them; a team named after one would fight the scheduler.
* Kubernetes' ``system-`` PriorityClass prefix (``pkg/apis/scheduling/validation/
  validation.go`` ``ValidatePriorityClass``: names starting with ``system-`` are reserved for the
  built-in ``system-cluster-critical`` / ``system-node-critical``).
* Length with every suffix the renderer adds: a department's own-namespaces leaf Queue is
  ``<slug>.own``; Queue names are DNS-1123 subdomains (a CRD object's name, at most 253), and
  each derived name must fit its own limit.
* Protected namespaces: glob patterns (``fnmatch``, case-sensitive) such as ``kube-*``; the
  default list is :data:`DEFAULT_PROTECTED_NAMESPACES`, the installation adds its own (see
  ``quotas.protection``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

__all__ = [
    "DEFAULT_PROTECTED_NAMESPACES",
    "DNS1123_LABEL_MAX",
    "LABEL_VALUE_MAX",
    "OWN_QUEUE_SUFFIX",
    "RESERVED_QUEUE_NAMES",
    "SUBDOMAIN_MAX",
    "SYSTEM_PRIORITY_PREFIX",
    "dns1123_label_errors",
    "protected_by",
    "team_slug_errors",
    "tier_name_errors",
]

DNS1123_LABEL_MAX = 63
LABEL_VALUE_MAX = 63
SUBDOMAIN_MAX = 253
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Volcano creates these queues itself (the scheduler's ``root``, the ``default`` queue).
RESERVED_QUEUE_NAMES = frozenset({"default", "root"})
# A department with namespaces of its own gets a leaf Queue ``<slug>.own`` (see render.py).
OWN_QUEUE_SUFFIX = ".own"
SYSTEM_PRIORITY_PREFIX = "system-"
# Kubernetes' own namespaces, the default namespace and Volcano's.
DEFAULT_PROTECTED_NAMESPACES: tuple[str, ...] = ("kube-*", "default", "volcano-*", "kueue-*")


def dns1123_label_errors(value: str) -> list[str]:
    """Why ``value`` is not a DNS-1123 label (empty list when it is)."""
    errors = []
    if len(value) > DNS1123_LABEL_MAX:
        errors.append(f"must be at most {DNS1123_LABEL_MAX} characters (it has {len(value)})")
    if not _DNS1123_LABEL.match(value):
        errors.append(
            "must be a DNS-1123 label: lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return errors


def team_slug_errors(slug: str) -> list[str]:
    """Why a team slug cannot name the team's Queue, its leaf Queue and its label value."""
    errors = dns1123_label_errors(slug)
    if slug in RESERVED_QUEUE_NAMES:
        errors.append(
            f"{slug!r} is reserved: Volcano creates the queues "
            f"{' and '.join(repr(n) for n in sorted(RESERVED_QUEUE_NAMES))} itself"
        )
    leaf = f"{slug}{OWN_QUEUE_SUFFIX}"
    if len(leaf) > SUBDOMAIN_MAX:
        errors.append(f"the department leaf Queue {leaf!r} would exceed {SUBDOMAIN_MAX} characters")
    return errors


def tier_name_errors(name: str) -> list[str]:
    """Why a tier name cannot name a PriorityClass and the ``fairshare.io/tier`` label value."""
    errors = dns1123_label_errors(name)
    if name.startswith(SYSTEM_PRIORITY_PREFIX):
        errors.append(
            f"names starting with {SYSTEM_PRIORITY_PREFIX!r} are reserved by Kubernetes "
            "for its own PriorityClasses"
        )
    return errors


def protected_by(name: str, patterns: Iterable[str]) -> str | None:
    """The first protected-namespace pattern ``name`` matches, or None."""
    for pattern in patterns:
        if pattern and fnmatchcase(name, pattern):
            return pattern
    return None
