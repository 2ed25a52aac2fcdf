"""Signals other apps listen to, so quotas never imports scheduling (or tasks) at module level."""

from django.dispatch import Signal

# Sent after commit whenever guarantees, limits, weights or tiers change.
# Arguments: team_ids (list[int]), reason (str), request_ids (list[int]: the quota requests
# whose approved amounts this change applies; the sync it starts records them).
quota_changed = Signal()

# Sent after commit whenever a membership is added, changes role or is removed (memberships are
# rendered as RoleBindings). Arguments: reason ("add", "role" or "remove").
membership_changed = Signal()
