"""A throwaway certificate authority and server certificate for one emulator instance.

The bearer-token policy of azure-core refuses plain ``http://``, so the emulator serves HTTPS.
Each instance makes its own CA and a leaf certificate for ``127.0.0.1``, ``::1`` and
``localhost`` (EC P-256 keys: generating them takes about a millisecond), writes them into a
private temporary directory and removes that directory at stop. Clients trust the CA by passing
``connection_verify=<ca_file>``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from foundry_checkpoint.errors import MissingDependencyError

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ModuleNotFoundError as exc:  # the emulator extra is not installed
    if (exc.name or "").split(".")[0] != "cryptography":
        raise
    raise MissingDependencyError(
        "foundry_checkpoint.emulator needs the cryptography package to make its TLS "
        "certificates, and it is not installed: pip install 'foundry-checkpoint[emulator]'"
    ) from exc

__all__ = ["TlsMaterial", "make_tls_material"]

_VALIDITY = datetime.timedelta(days=30)
_CLOCK_SKEW = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class TlsMaterial:
    """Where one emulator's certificate files live.

    ``ca_file`` is what clients trust; ``cert_file``/``key_file`` are the server's chain and key.
    """

    directory: Path
    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        """Make a server-side SSL context.

        Returns:
            A context loaded with the leaf certificate chain and its key.
        """
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context

    def remove(self) -> None:
        """Delete the directory holding the files (a missing directory is fine)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "foundry-checkpoint emulator"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def make_tls_material(hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")) -> TlsMaterial:
    """Create a CA and a server certificate in a new private temporary directory.

    Args:
        hosts: The names and addresses the server certificate is valid for.

    Returns:
        Where the CA, the certificate chain and the key were written.

    Example:
        >>> material = make_tls_material()
        >>> material.ca_file.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
        True
        >>> material.remove()
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - _CLOCK_SKEW, now + _VALIDITY

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("foundry-checkpoint emulator CA")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    directory = Path(tempfile.mkdtemp(prefix="foundry-emulator-tls-"))
    material = TlsMaterial(
        directory=directory,
        ca_file=directory / "ca.pem",
        cert_file=directory / "server.pem",
        key_file=directory / "server-key.pem",
    )
    pem = serialization.Encoding.PEM
    _write(material.ca_file, ca_cert.public_bytes(pem))
    _write(material.cert_file, leaf_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    _write(
        material.key_file,
        leaf_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        private=True,
    )
    return material
