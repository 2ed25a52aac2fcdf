from django.urls import path

from quotas import views

app_name = "quotas"

urlpatterns = [
    path("teams/<slug:slug>/", views.team_detail, name="team"),
    path("teams/<slug:slug>/members/", views.member_add, name="member_add"),
    path(
        "teams/<slug:slug>/members/<int:membership_id>/",
        views.member_update,
        name="member_update",
    ),
    path(
        "teams/<slug:slug>/members/<int:membership_id>/remove/",
        views.member_remove,
        name="member_remove",
    ),
    path(
        "teams/<slug:slug>/requests/new/",
        views.quotarequest_create,
        name="quotarequest_create",
    ),
    path(
        "teams/<slug:slug>/requests/preview/",
        views.quotarequest_preview,
        name="quotarequest_preview",
    ),
    path("requests/", views.quotarequest_list, name="quotarequest_list"),
    path("requests/<int:pk>/", views.quotarequest_detail, name="quotarequest"),
    path("requests/<int:pk>/withdraw/", views.quotarequest_withdraw, name="quotarequest_withdraw"),
    path("approvals/", views.approval_queue, name="approval_queue"),
    path("approvals/<int:pk>/preview/", views.approval_preview, name="approval_preview"),
    path("approvals/<int:pk>/decide/", views.quotarequest_decide, name="quotarequest_decide"),
    path("rebalance/", views.rebalance, name="rebalance"),
]
