"""Run the fake API server on its own: ``python -m tests.kubeapi --port 8001``.

Prints the URL and writes a kubeconfig (``--kubeconfig PATH``) that kubectl and the kubernetes
client can use; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

import yaml

from .server import FakeKubeApi


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kubeapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="where to write the kubeconfig")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed for probabilistic faults")
    parser.add_argument(
        "--tls",
        metavar="DIR",
        help="serve HTTPS with a fresh CA and certificates (openssl) written to DIR; the "
        "server is then named localhost, and the kubeconfig trusts the CA",
    )
    parser.add_argument(
        "--load",
        action="append",
        default=[],
        help="JSON or YAML file of objects (a list, a List kind or a multi-document YAML)",
    )
    args = parser.parse_args(argv)
    tls: dict = {}
    host = args.host
    if args.tls:
        from .tls import make_pki

        pki = make_pki(Path(args.tls), names=("localhost",))
        tls = {"tls": pki.server_context(), "ca_file": pki.ca}
        host = "localhost" if host == "127.0.0.1" else host  # the name the certificate has
    server = FakeKubeApi(host, args.port, seed=args.seed, **tls).start()
    server.reset()
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    for path in args.load:
        server.load(_read_objects(Path(path)))
    print(f"fake Kubernetes API server at {server.url}", flush=True)
    print(f"kubeconfig: {args.kubeconfig or server.kubeconfig_path}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _read_objects(path: Path) -> list[dict]:
    text = path.read_text()
    if path.suffix == ".json":
        docs = [json.loads(text)]
    else:
        docs = [d for d in yaml.safe_load_all(text) if d]
    objects: list[dict] = []
    for doc in docs:
        if isinstance(doc, list):
            objects.extend(doc)
        elif isinstance(doc, dict) and "items" in doc:
            objects.extend(doc["items"])
        else:
            objects.append(doc)
    return objects


if __name__ == "__main__":
    sys.exit(main())
