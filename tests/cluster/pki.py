"""The control plane's certificates and kubeconfigs: one CA, a serving cert per server, a client cert per identity.

The shape follows kubeadm's PKI (and kwok's `pkg/kwokctl/pki`): the API server's serving cert names every
in-cluster spelling of the `kubernetes` Service, each component authenticates with a client cert whose CN is
its user and whose O its group, and service-account tokens are signed by a separate RSA key.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)  # longer than cert-controller's 90-day look-ahead, so nothing rotates
API_SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
API_SERVER_IPS = ("127.0.0.1", "10.0.0.1")  # loopback, and the first address of the Service range


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


class Authority:
    """A CA that signs the control plane's certificates into one folder."""

    def __init__(self, folder: Path, common_name: str = "bakeoff-cluster-ca") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pair = KeyPair(folder / f"{common_name}.crt", folder / f"{common_name}.key")
        self.pair.cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.key, self.pair.key)

    @classmethod
    def load(cls, folder: Path, common_name: str = "bakeoff-cluster-ca") -> Authority:
        """The CA a running control plane wrote into ``folder``: to issue a client cert for one more user."""
        ca = cls.__new__(cls)
        ca.folder = folder
        ca.pair = KeyPair(folder / f"{common_name}.crt", folder / f"{common_name}.key")
        ca.cert = x509.load_pem_x509_certificate(ca.pair.cert.read_bytes())
        key = serialization.load_pem_private_key(ca.pair.key.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), type(key)
        ca.key = key
        return ca

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organization: str | None = None,
        server: bool = False,
        client: bool = False,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if dns or ips:
            names = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


def service_account_keys(folder: Path) -> KeyPair:
    """The RSA pair that signs service-account tokens (`cert` holds the public key, as the flags want)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = KeyPair(folder / "sa.pub", folder / "sa.key")
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    _write_key(key, pair.key)
    return pair


def kubeconfig(
    path: Path, server: str, ca: Path, *, user: str, client: KeyPair | None = None, token: str | None = None
) -> Path:
    """A kubeconfig for one identity: a client cert, or a bearer token."""
    credentials: dict[str, str] = {}
    if client is not None:
        credentials = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    if token is not None:
        credentials = {"token": token}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "bakeoff",
        "clusters": [{"name": "bakeoff", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "bakeoff", "context": {"cluster": "bakeoff", "user": user}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
