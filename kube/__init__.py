"""The Kubernetes client edge: the only package that imports ``kubernetes``.

Below both ``monitoring`` (the collector reads nodes, pods and PodGroups) and ``scheduling`` (the
sync plans, applies and prunes, the watcher repairs drift): it imports no app of this project,
takes what it needs as arguments (the cluster mode, the API client) and raises its own errors
(``kube.errors``), which callers catch next to their own.

* ``client``: building the API client, the managed kinds, raw JSON REST calls;
* ``observe``: paginated LISTs; ``watch``: reflectors over LIST+WATCH;
* ``apply``: server-side apply, delete, the one retry policy;
* ``scheduler_config``: reading Volcano's scheduler configuration;
* ``errors``: the error hierarchy every call is translated into.
"""
