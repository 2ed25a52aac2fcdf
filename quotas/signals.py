"""Signals other apps listen to, so quotas never imports scheduling (or tasks) at module level."""

from django.dispatch import Signal

# Sent after commit whenever guarantees, limits, weights or tiers change.
# Arguments: team_ids (list[int]), reason (str), request_ids (list[int]: the quota requests
# whose approved amounts this change applies; the sync it starts records them).
quota_changed = Signal()

# Sent after commit whenever a membership is added, changes role or is removed (memberships are
# rendered as RoleBindings). Arguments: reason ("add", "role" or "remove").
membership_changed = Signal()

# Sent by ``Team.save`` inside its transaction, right after the row is written (not for a save
# marked ``_skip_transitions``). Arguments: team, before (the row's ``parent_id`` and ``active``
# before the save; None for a new team), actor. ``quotas.transitions`` listens (connected in
# ``QuotasConfig.ready``) and starts the transition the save needs; an error it raises rolls
# the save back. A signal, because the models cannot import the module that imports them.
team_saved = Signal()
