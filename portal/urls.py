from django.urls import path

from portal.views import (
    adopt,
    approvals,
    fairness,
    metrics,
    quota_edit,
    rebalance,
    reports,
    requests,
    teams,
    tokens,
)

app_name = "portal"

urlpatterns = [
    path("metrics", metrics.metrics, name="metrics"),
    path("teams/<slug:slug>/", teams.team_detail, name="team"),
    path("teams/<slug:slug>/members/", teams.member_add, name="member_add"),
    path(
        "teams/<slug:slug>/members/<int:membership_id>/",
        teams.member_update,
        name="member_update",
    ),
    path(
        "teams/<slug:slug>/members/<int:membership_id>/remove/",
        teams.member_remove,
        name="member_remove",
    ),
    path(
        "teams/<slug:slug>/requests/new/",
        requests.quotarequest_create,
        name="quotarequest_create",
    ),
    path(
        "teams/<slug:slug>/requests/preview/",
        requests.quotarequest_preview,
        name="quotarequest_preview",
    ),
    path(
        "teams/<slug:slug>/transitions/<int:transition_id>/cancel/",
        teams.transition_cancel,
        name="transition_cancel",
    ),
    path("teams/<slug:slug>/quota/", quota_edit.quota_edit, name="quota_edit"),
    path(
        "teams/<slug:slug>/quota/preview/", quota_edit.quota_edit_preview, name="quota_edit_preview"
    ),
    path("requests/", requests.quotarequest_list, name="quotarequest_list"),
    path("requests/<int:pk>/", requests.quotarequest_detail, name="quotarequest"),
    path(
        "requests/<int:pk>/withdraw/", requests.quotarequest_withdraw, name="quotarequest_withdraw"
    ),
    path("requests/<int:pk>/end/", requests.quotarequest_end, name="quotarequest_end"),
    path("approvals/", approvals.approval_queue, name="approval_queue"),
    path("approvals/reject/", approvals.approval_bulk_reject, name="approval_bulk_reject"),
    path("approvals/<int:pk>/preview/", approvals.approval_preview, name="approval_preview"),
    path("approvals/<int:pk>/decide/", approvals.quotarequest_decide, name="quotarequest_decide"),
    path("rebalance/", rebalance.rebalance, name="rebalance"),
    path("fairness/", fairness.fairness, name="fairness"),
    path("namespaces/adopt/", adopt.adopt, name="adopt_namespace"),
    path("reports/", reports.reports, name="reports"),
    path("reports/chargeback.csv", reports.reports_csv, name="reports_csv"),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", tokens.token_revoke, name="token_revoke"),
]
