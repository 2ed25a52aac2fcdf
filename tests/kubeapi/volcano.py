"""Volcano's admission webhooks and queue controller, as the fake API server imitates them.

Pure functions over plain dicts; ``server.py`` calls them around each write. Each one names the
upstream file and function it follows (volcano-sh/volcano, master of 2026-08, the commit the
CRDs in ``/work/shared/schemas/volcano`` come from):

* :func:`mutate_queue` — ``pkg/webhooks/admission/queues/mutate/mutate_queue.go``
  ``createQueuePatch`` (CREATE only): ``reclaimable: true`` and ``weight: 1`` when unset;
* :func:`validate_queue` / :func:`validate_queue_delete` —
  ``pkg/webhooks/admission/queues/validate/validate_queue.go`` ``AdmitQueues`` and what it calls;
* :func:`controller_queue_patch` — ``pkg/controllers/queue/queue_controller_action.go``
  ``updateQueueParent`` (``spec.parent: root`` on a parentless queue) and the open state that
  ``syncQueue``/``openQueue`` apply to a new queue's status;
* :func:`mutate_podgroup` / :func:`validate_podgroup` —
  ``pkg/webhooks/admission/podgroups/mutate/mutate_podgroup.go`` ``createPodGroupPatch`` and
  ``podgroups/validate/validate_podgroup.go`` ``checkQueueState``;
* :func:`scheduler_blocked` / :func:`stranded_podgroups` — what the scheduler does with
  PodGroups and queues: ``pkg/scheduler/plugins/capacity/capacity.go``
  ``buildHierarchicalQueueAttrs`` and ``pkg/scheduler/cache/cache.go`` ``Snapshot``;
* :func:`admit_job` — ``pkg/webhooks/admission/jobs/mutate/mutate_job.go``
  ``patchDefaultQueue`` and ``jobs/validate/admit_job.go`` ``validateJobCreate`` (queue exists,
  is open, is not ``root`` and is a leaf).

Amounts follow ``pkg/scheduler/api/resource_info.go`` ``NewResource``: cpu in millicores,
memory in bytes, every other resource as a scalar in milli-units; ``LessPartly`` with ``Zero``
counts a scalar the left side lacks as smaller.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

ROOT = "root"
DEFAULT = "default"
QUEUE_NAME_ANNOTATION = "scheduling.volcano.sh/queue-name"
CONTROLLER = "queue-controller"
# cmd/webhook-manager/app/options/options.go defaultMaxQueueDepth
MAX_QUEUE_DEPTH = 5

Queues = Mapping[str, Mapping[str, Any]]


class Denied(Exception):
    """The webhook refused the request; the message is Volcano's."""


# --------------------------------------------------------------------------- resources


def _resource(resources: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """``NewResource``: cpu → millicores, memory → bytes, scalars → milli-units."""
    out: dict[str, Decimal] = {}
    for name, quantity in (resources or {}).items():
        value = Decimal(parse_quantity(quantity))
        if name == "memory" or name == "pods":
            out[name] = value
        else:
            out[name] = value * 1000
    out.setdefault("cpu", Decimal(0))
    out.setdefault("memory", Decimal(0))
    return out


def _less_partly(left: Mapping[str, Decimal], right: Mapping[str, Decimal]) -> bool:
    """``Resource.LessPartly(rr, Zero)``: some dimension of ``left`` is smaller than ``right``'s;
    a scalar ``right`` has and ``left`` lacks counts as smaller."""
    if left["cpu"] < right["cpu"] or left["memory"] < right["memory"]:
        return True
    scalars = set(right) - {"cpu", "memory"}
    if any(name not in left for name in scalars):
        return True
    return any(left[name] < right.get(name, Decimal(0)) for name in set(left) - {"cpu", "memory"})


def _add(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def _fmt(resource: Mapping[str, Decimal]) -> str:
    parts = [f"cpu {resource['cpu']}, memory {resource['memory']}"]
    parts += [f"{k} {v}" for k, v in sorted(resource.items()) if k not in ("cpu", "memory")]
    return "<" + ", ".join(parts) + ">"


def _spec(queue: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (queue or {}).get("spec") or {}


def _guarantee(queue: Mapping[str, Any]) -> dict[str, Decimal]:
    return _resource((_spec(queue).get("guarantee") or {}).get("resource"))


def _deserved(queue: Mapping[str, Any]) -> dict[str, Decimal]:
    return _resource(_spec(queue).get("deserved"))


def _parent(queue: Mapping[str, Any] | None) -> str:
    return str(_spec(queue).get("parent") or "")


def children_of(name: str, queues: Queues) -> list[Mapping[str, Any]]:
    """``config.GetQueuesByParent``: the queues whose ``spec.parent`` is ``name``."""
    return [q for n, q in sorted(queues.items()) if _parent(q) == name and n != name]


# --------------------------------------------------------------------------- queue webhooks


def mutate_queue(queue: dict[str, Any]) -> list[dict[str, Any]]:
    """``mutate_queue.go`` ``createQueuePatch``: the JSON patch for a new queue."""
    spec = queue.get("spec") or {}
    patch: list[dict[str, Any]] = []
    if "spec" not in queue:
        patch.append({"op": "add", "path": "/spec", "value": {}})
    if spec.get("reclaimable") is None:
        patch.append({"op": "add", "path": "/spec/reclaimable", "value": True})
    if not spec.get("weight"):
        patch.append({"op": "add", "path": "/spec/weight", "value": 1})
    return patch


def validate_queue(queue: Mapping[str, Any], old: Mapping[str, Any] | None, queues: Queues) -> None:
    """``validate_queue.go`` ``AdmitQueues`` for CREATE (``old`` None) and UPDATE.

    ``queues`` is the queue lister's view: the stored queues before this write. Raises Denied.
    """
    name = queue["metadata"]["name"]
    _validate_resource_quantity(_spec(queue))
    if old is None or _parent(old) != _parent(queue):
        _validate_hierarchical_queue(queue, queues)
    if name != ROOT and _needs_hierarchy_check(queue, old):
        _validate_hierarchical_resources(queue, queues)


def validate_queue_delete(name: str, queues: Queues) -> None:
    """``validate_queue.go`` ``validateQueueDeleting``."""
    if name in (DEFAULT, ROOT):
        raise Denied(f"`{name}` queue can not be deleted")
    children = [q["metadata"]["name"] for q in children_of(name, queues)]
    if children:
        raise Denied(
            f"queue {name} can not be deleted because it has {len(children)} child queues: "
            + ", ".join(children)
        )


def _is_integer_resource(name: str) -> bool:
    """``k8s.io/kubernetes/pkg/apis/core/helper/helpers.go`` ``IsIntegerResourceName``: the
    standard integer resources and every extended resource (a name with a domain that is not
    ``kubernetes.io/`` and not ``requests.``-prefixed)."""
    if name in _STANDARD_INTEGER_RESOURCES:
        return True
    native = "/" not in name or "kubernetes.io/" in name
    return not native and not name.startswith("requests.")


# helpers.go standardIntegerResources
_STANDARD_INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "requests.pods",
        "limits.pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)


def _quantity_value_problems(field: str, resource: str, quantity: Any) -> list[str]:
    """``pkg/apis/core/validation/validation.go`` ``ValidateResourceQuantityValue`` (called by
    ``validateResourceQuantityOfQueue`` for every capability, deserved and guarantee amount):
    ``ValidateNonnegativeQuantity``, and whole units for an integer resource."""
    try:
        value = Decimal(parse_quantity(quantity))
    except (ValueError, ArithmeticError):
        return []  # the CRD schema's quantity pattern refused it already
    problems = []
    if value < 0:
        problems.append(f'{field}: Invalid value: "{quantity}": must be greater than or equal to 0')
    if _is_integer_resource(resource) and (value * 1000) % 1000 != 0:
        problems.append(f'{field}: Invalid value: "{quantity}": must be an integer')
    return problems


def _validate_resource_quantity(spec: Mapping[str, Any]) -> None:
    """``validateResourceQuantityOfQueue``: each amount is a valid quantity value (non-negative,
    whole for integer resources such as ``nvidia.com/gpu``), and guarantee <= deserved <=
    capability per resource."""
    deserved = spec.get("deserved") or {}
    capability = spec.get("capability") or {}
    problems = []
    for section, amounts in (
        ("capability", capability),
        ("deserved", deserved),
        ("guarantee.resource", (spec.get("guarantee") or {}).get("resource") or {}),
    ):
        for resource, quantity in amounts.items():
            field = f"requestBody.spec.{section}.{resource}"
            problems += _quantity_value_problems(field, resource, quantity)
    for resource, quantity in ((spec.get("guarantee") or {}).get("resource") or {}).items():
        if resource not in deserved:
            problems.append(
                f'requestBody.spec.deserved.{resource}: Invalid value: "<nil>": '
                f"deserved[{resource}] must be >= guarantee[{resource}]={quantity}"
            )
        elif parse_quantity(deserved[resource]) < parse_quantity(quantity):
            problems.append(
                f"requestBody.spec.deserved.{resource}: Invalid value: "
                f'"{deserved[resource]}": deserved[{resource}]={deserved[resource]} must be >= '
                f"guarantee[{resource}]={quantity}"
            )
    for resource, quantity in deserved.items():
        if resource in capability and parse_quantity(quantity) > parse_quantity(
            capability[resource]
        ):
            problems.append(
                f'requestBody.spec.deserved.{resource}: Invalid value: "{quantity}": '
                f"deserved[{resource}]={quantity} must be <= "
                f"capability[{resource}]={capability[resource]}"
            )
    if problems:
        raise Denied(problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")


def _validate_hierarchical_queue(queue: Mapping[str, Any], queues: Queues) -> None:
    """``validateHierarchicalQueue`` (+ ``validateQueueDepth``): the parent must exist."""
    name, parent = queue["metadata"]["name"], _parent(queue)
    if parent in ("", ROOT):
        return
    if parent == name:
        raise Denied(f"queue {name} cannot use itself as parent")
    depth, current = 1, parent
    while current not in ("", ROOT):
        depth += 1
        if depth > MAX_QUEUE_DEPTH:
            raise Denied(f"queue {name} exceeds the maximum allowed depth of {MAX_QUEUE_DEPTH}")
        if current not in queues:
            raise Denied(
                f"failed to get parent queue {current} of queue {name}: "
                f'queue.scheduling.volcano.sh "{current}" not found'
            )
        current = _parent(queues[current])
    parent_queue = queues[parent]
    if not children_of(parent, queues):
        allocated = ((parent_queue.get("status") or {}).get("allocated") or {}).get("pods")
        if allocated and parse_quantity(allocated) > 0:
            raise Denied(
                f"queue {parent} cannot be the parent queue of queue {name} because it has "
                f"allocated Pods: {allocated}"
            )


def _needs_hierarchy_check(queue: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    """``needsValidateHierarchicalQueue``: on CREATE, or when parent or amounts change."""
    if old is None:
        return True
    new_spec, old_spec = _spec(queue), _spec(old)
    if _parent(queue) != _parent(old):
        return True
    return (
        _resource(new_spec.get("capability")) != _resource(old_spec.get("capability"))
        or _deserved(queue) != _deserved(old)
        or _guarantee(queue) != _guarantee(old)
    )


def _validate_hierarchical_resources(queue: Mapping[str, Any], queues: Queues) -> None:
    """``validateHierarchicalQueueResources``."""
    name, parent = queue["metadata"]["name"], _parent(queue)
    if parent not in ("", ROOT):
        parent_queue = queues.get(parent)
        if parent_queue is None:
            raise Denied(f"parent queue {parent} not found")
        _validate_child_against_ancestor(queue, queues)
        _validate_siblings_sum(queue, parent_queue, children_of(parent, queues))
    children = [c for c in children_of(name, queues)]
    if children:
        _validate_children_constraints(queue, children, queues)


def _nearest_ancestor_capability(
    queue: Mapping[str, Any], resource: str, queues: Queues
) -> Decimal | None:
    """``findNearestAncestorCapability``: the first ancestor with a positive amount."""
    parent, seen = _parent(queue), set()
    while parent not in ("", ROOT) and parent not in seen:
        seen.add(parent)
        ancestor = queues.get(parent)
        if ancestor is None:
            return None
        value = _resource(_spec(ancestor).get("capability")).get(resource, Decimal(0))
        if value > 0:
            return value
        parent = _parent(ancestor)
    return None


def _validate_child_against_ancestor(queue: Mapping[str, Any], queues: Queues) -> None:
    """``validateChildAgainstAncestor``."""
    name = queue["metadata"]["name"]
    capability = _spec(queue).get("capability")
    if not capability:
        return
    for resource, value in sorted(_resource(capability).items()):
        if resource not in capability:
            continue
        limit = _nearest_ancestor_capability(queue, resource, queues)
        if limit is not None and value > limit:
            raise Denied(
                f"queue {name} capability[{resource}]={value} exceeds its ancestor's "
                f"capability={limit}"
            )


def _validate_siblings_sum(
    queue: Mapping[str, Any], parent: Mapping[str, Any], siblings: list[Mapping[str, Any]]
) -> None:
    """``validateSiblingsSum``: Σ siblings' guarantee and deserved (this queue included, with
    its new amounts) <= the parent's."""
    name, parent_name = queue["metadata"]["name"], parent["metadata"]["name"]
    total_guarantee: dict[str, Decimal] = {"cpu": Decimal(0), "memory": Decimal(0)}
    total_deserved: dict[str, Decimal] = {"cpu": Decimal(0), "memory": Decimal(0)}
    parent_guarantee, parent_deserved = _guarantee(parent), _deserved(parent)
    members = [s for s in siblings if s["metadata"]["name"] != name] + [queue]
    for sibling in members:
        _add(total_guarantee, _guarantee(sibling))
        if _less_partly(parent_guarantee, total_guarantee):
            raise Denied(
                f"parent queue {parent_name} validation failed: sum of children's guarantee "
                f"({_fmt(total_guarantee)}) exceeds parent's guarantee limit "
                f"({_fmt(parent_guarantee)})"
            )
        _add(total_deserved, _deserved(sibling))
        if _less_partly(parent_deserved, total_deserved):
            raise Denied(
                f"parent queue {parent_name} validation failed: sum of children's deserved "
                f"({_fmt(total_deserved)}) exceeds parent's deserved limit "
                f"({_fmt(parent_deserved)})"
            )


def _subtree_max_capability(queue: Mapping[str, Any], resource: str, queues: Queues) -> Decimal:
    """``findSubtreeMaxCapability``."""
    value = _resource(_spec(queue).get("capability")).get(resource, Decimal(0))
    if value > 0:
        return value
    return max(
        (
            _subtree_max_capability(child, resource, queues)
            for child in children_of(queue["metadata"]["name"], queues)
        ),
        default=Decimal(0),
    )


def _validate_children_constraints(
    parent: Mapping[str, Any], children: list[Mapping[str, Any]], queues: Queues
) -> None:
    """``validateChildrenConstraints``: the parent's capability covers every subtree's, its
    guarantee and deserved the children's sums."""
    name = parent["metadata"]["name"]
    capability = _spec(parent).get("capability")
    if capability:
        for resource, value in sorted(_resource(capability).items()):
            if resource not in capability:
                continue
            child_max = max(
                (_subtree_max_capability(c, resource, queues) for c in children),
                default=Decimal(0),
            )
            if value < child_max:
                raise Denied(
                    f"queue {name} capability[{resource}]={value} is smaller than its "
                    f"descendants' max capability={child_max}"
                )
    total_guarantee: dict[str, Decimal] = {"cpu": Decimal(0), "memory": Decimal(0)}
    total_deserved: dict[str, Decimal] = {"cpu": Decimal(0), "memory": Decimal(0)}
    for child in children:
        _add(total_guarantee, _guarantee(child))
        if _less_partly(_guarantee(parent), total_guarantee):
            raise Denied(
                f"queue {name} validation failed: sum of children's guarantee "
                f"({_fmt(total_guarantee)}) exceeds parent's guarantee limit "
                f"({_fmt(_guarantee(parent))})"
            )
        _add(total_deserved, _deserved(child))
        if _less_partly(_deserved(parent), total_deserved):
            raise Denied(
                f"queue {name} validation failed: sum of children's deserved "
                f"({_fmt(total_deserved)}) exceeds parent's deserved limit "
                f"({_fmt(_deserved(parent))})"
            )


# --------------------------------------------------------------------------- controller


def controller_queue_patch(queue: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the queue controller patches onto a queue after it was written.

    ``queue_controller_action.go`` ``updateQueueParent``: a JSON patch
    ``add /spec/parent root`` for a queue (other than ``root``) without a parent.
    """
    name = queue["metadata"]["name"]
    if name == ROOT or _parent(queue):
        return []
    return [{"op": "add", "path": "/spec/parent", "value": ROOT}]


def controller_queue_status(queue: Mapping[str, Any]) -> dict[str, Any] | None:
    """``syncQueue``/``openQueue`` via the ``unknown`` state: a new queue's status becomes
    ``state: Open`` (applied to the status subresource). None when nothing changes."""
    status = queue.get("status") or {}
    if status.get("state"):
        return None
    return {**status, "state": "Open"}


# --------------------------------------------------------------------------- podgroups and jobs


def mutate_podgroup(
    podgroup: Mapping[str, Any], namespace: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """``mutate_podgroup.go`` ``createPodGroupPatch``: a PodGroup on the ``default`` queue moves
    to the queue its namespace's ``scheduling.volcano.sh/queue-name`` annotation names.

    CREATE only (``PodGroups`` refuses any other operation, and the webhook is registered for
    CREATE): a PodGroup's queue is fixed when it is created. Re-annotating the namespace, or
    updating the PodGroup, never re-routes it; the job controller does not move it either
    (``pkg/controllers/job/job_controller_actions.go`` ``createOrUpdatePodGroup`` sets
    ``spec.queue`` only when it creates the PodGroup)."""
    if (_spec(podgroup).get("queue") or DEFAULT) != DEFAULT or namespace is None:
        return []
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    if QUEUE_NAME_ANNOTATION not in annotations:
        return []
    return [{"op": "add", "path": "/spec/queue", "value": annotations[QUEUE_NAME_ANNOTATION]}]


def validate_podgroup(podgroup: Mapping[str, Any], queues: Queues) -> None:
    """``validate_podgroup.go`` ``checkQueueState``: the queue exists and is open."""
    name = _spec(podgroup).get("queue") or ""
    if not name:
        return
    queue = queues.get(name)
    if queue is None:
        raise Denied(f'unable to find queue: queue.scheduling.volcano.sh "{name}" not found')
    state = (queue.get("status") or {}).get("state")
    if state != "Open":
        raise Denied(
            f"can only submit PodGroup to queue with state `Open`, queue `{name}` status is "
            f"`{state or ''}`. "
        )


def admit_job(job: dict[str, Any], queues: Queues) -> None:
    """``mutate_job.go`` ``patchDefaultQueue`` then ``admit_job.go`` ``validateJobCreate``'s
    queue checks: the queue exists, is open, is not ``root``, and has no children."""
    spec = job.setdefault("spec", {})
    if not spec.get("queue"):
        spec["queue"] = DEFAULT
    name = spec["queue"]
    queue = queues.get(name)
    if queue is None:
        raise Denied(f' unable to find job queue: queue.scheduling.volcano.sh "{name}" not found;')
    state = (queue.get("status") or {}).get("state")
    if state != "Open":
        raise Denied(
            f" can only submit job to queue with state `Open`, queue `{name}` status is "
            f"`{state or ''}`;"
        )
    if name == ROOT:
        raise Denied(" can not submit job to root queue;")
    children = children_of(name, queues)
    if children:
        raise Denied(
            f" can only submit job to leaf queue, queue `{name}` has {len(children)} child queues;"
        )


# --------------------------------------------------------------------------- scheduler


def _podgroup_queue(podgroup: Mapping[str, Any]) -> str:
    return str(_spec(podgroup).get("queue") or DEFAULT)


def _waiting(podgroup: Mapping[str, Any]) -> bool:
    """A PodGroup with work still to run: not ``Completed``
    (``volcano.sh/apis`` ``pkg/apis/scheduling/v1beta1/types.go`` ``PodGroupCompleted``)."""
    return ((podgroup.get("status") or {}).get("phase") or "") != "Completed"


def scheduler_blocked(
    podgroups: list[Mapping[str, Any]], queues: Queues, *, hierarchy: bool = True
) -> str | None:
    """Why the scheduler's capacity plugin allocates and enqueues nothing in the whole cluster
    this session, or None.

    ``pkg/scheduler/plugins/capacity/capacity.go`` ``OnSessionOpen``: with the hierarchy on
    (``ssn.HierarchyEnabled``, the ``capacity`` plugin with ``enableHierarchy: true``, as
    Fairshare's scheduler configuration ships), ``readyToSchedule`` is
    ``buildHierarchicalQueueAttrs(ssn)``; when it is false every ``AllocatableFn``,
    ``JobEnqueueableFn``, ``PreemptiveFn`` and reclaim function of the plugin rejects, for
    every queue. ``buildHierarchicalQueueAttrs`` returns false when ``updateAncestors`` fails
    (a queue whose parent does not exist: "the queue %s has invalid parent queue %s") or when
    a job of the session sits in a queue with children ("The Queue <%s> of Job <%s/%s> is not
    leaf queue"). The session's jobs are the PodGroups whose queue exists
    (``pkg/scheduler/cache/cache.go`` ``Snapshot`` skips the others). Without the hierarchy
    (``buildQueueAttrs``) nothing blocks the whole cluster.
    """
    if not hierarchy:
        return None
    for name, queue in sorted(queues.items()):
        if name == ROOT:
            continue
        parent = _parent(queue) or ROOT
        if parent not in queues:
            return f"the queue {name} has invalid parent queue {parent}"
    for podgroup in _sorted_podgroups(podgroups):
        name = _podgroup_queue(podgroup)
        if name not in queues:
            continue
        if children_of(name, queues):
            meta = podgroup["metadata"]
            return (
                f"The Queue <{name}> of Job <{meta.get('namespace')}/{meta['name']}> is not "
                "leaf queue"
            )
    return None


def stranded_podgroups(
    podgroups: list[Mapping[str, Any]], queues: Queues
) -> list[tuple[str, str, str, str]]:
    """The PodGroups with work left (not ``Completed``) that the scheduler will never run where
    they are, as ``(namespace, name, queue, reason)``: their queue does not exist (``cache.go``
    ``Snapshot``: "The Queue <%v> of Job <%v/%v> does not exist, ignore it"; a PodGroup's queue
    never changes after creation, see :func:`mutate_podgroup`) or is not a leaf (``capacity.go``
    ``AllocatableFn``: "Queue <%s> is not a leaf queue, can not allocate task", and the
    whole-cluster refusal of :func:`scheduler_blocked`)."""
    out = []
    for podgroup in _sorted_podgroups(podgroups):
        if not _waiting(podgroup):
            continue
        meta, name = podgroup["metadata"], _podgroup_queue(podgroup)
        if name not in queues:
            reason = f"queue {name} does not exist"
        elif name == ROOT or children_of(name, queues):
            reason = f"queue {name} is not a leaf queue"
        else:
            continue
        out.append((str(meta.get("namespace") or ""), str(meta["name"]), name, reason))
    return out


def _sorted_podgroups(podgroups: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(
        podgroups, key=lambda p: (p["metadata"].get("namespace") or "", p["metadata"]["name"])
    )
