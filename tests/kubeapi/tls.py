"""Certificates for the fake API server over HTTPS, made with the ``openssl`` command.

A cluster's PKI as kubeadm lays it out (``kubeadm`` ``cmd/kubeadm/app/phases/certs``): one CA
that signs the API server's serving certificate (names in its subjectAltName) and the clients'
certificates (the user is the certificate's CN, the groups its O). The serving certificate is
for the DNS names asked for only, so tests can tell a checked name from an unchecked one.
"""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str  # a CA that signed none of these

    def server_context(self, *, verify_clients: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        if verify_clients:
            # --client-ca-file: a client must present a certificate this CA signed.
            context.load_verify_locations(self.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def make_pki(directory: Path, *, names: tuple[str, ...] = ("kubernetes.default.svc",)) -> Pki:
    """A CA, a serving certificate for ``names`` (DNS names only), a client certificate for
    user ``fairshare`` in group ``system:masters``, and an unrelated CA."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-subj", f"/CN={ca}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d,
        )  # fmt: skip
    san = ",".join(f"DNS:{name}" for name in names)
    for leaf, subject, extensions in (
        ("server", "/CN=kube-apiserver", f"subjectAltName={san}\nextendedKeyUsage=serverAuth"),
        ("client", "/O=system:masters/CN=fairshare", "extendedKeyUsage=clientAuth"),
    ):
        (d / f"{leaf}.ext").write_text(extensions + "\n")
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{leaf}.key",
            "-out", f"{leaf}.csr", "-subj", subject,
            cwd=d,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{leaf}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{leaf}.crt", "-extfile", f"{leaf}.ext",
            cwd=d,
        )  # fmt: skip
    return Pki(
        ca=str(d / "ca.crt"),
        server_cert=str(d / "server.crt"),
        server_key=str(d / "server.key"),
        client_cert=str(d / "client.crt"),
        client_key=str(d / "client.key"),
        other_ca=str(d / "other-ca.crt"),
    )
