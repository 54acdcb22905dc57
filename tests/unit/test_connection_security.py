"""How cdckit reaches its sources, as a security review asked: the SQL Server connection factory is a test seam only
the lab's code may fill, every value of the ODBC connection string is braced (a host name cannot add attributes),
and PostgreSQL's TLS settings reach libpq as Debezium and libpq document them (the server side is
tests/integration/test_postgres_tls.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from cdckit.config import validate
from cdckit.config.properties import POSTGRES_CONNECTOR, SQLSERVER_CONNECTOR
from cdckit.dialect.postgres import connection as pg
from cdckit.dialect.sqlserver import queries
from cdckit.dialect.sqlserver.connection import connect, connection_string
from cdckit.errors import ConfigurationError, SourceConnectionError
from cdckit_lab.sqlserver_model import SqlServerModel
from cdckit_lab.sqlserver_model._dbapi import parse_connection_string

SQLSERVER = {"connector.class": SQLSERVER_CONNECTOR, "database.hostname": "sql.example.com", "database.user": "cdc",
             "database.password": "Pw-0f-the-login", "database.names": "testDB", "topic.prefix": "server1"}
POSTGRES = {"connector.class": POSTGRES_CONNECTOR, "database.hostname": "db.example.com", "database.user": "cdc",
            "database.password": "Pw-0f-the-login", "database.dbname": "shop", "topic.prefix": "dbserver1"}
FACTORY = "cdckit.sqlserver.connection.factory"


def problems_of(raw: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigurationError) as refused:
        validate(raw)
    return refused.value.problems


# -- cdckit.sqlserver.connection.factory: the lab's test seam, nothing else ---------------------------------------


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module on the import path that leaves a file behind when it is imported."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_factory.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                                 f"def connect(text, **kwargs):\n    raise SystemExit('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_factory", raising=False)
    return marker


@pytest.mark.parametrize("target", ["planted_factory:connect", "os:system", "subprocess:getoutput",
                                    "cdckit_labs.x:connect", "cdckit_lab:connect", "cdckit_lab.sqlserver_model",
                                    "cdckit_lab..sqlserver_model:connect", "cdckit_lab.sqlserver_model:connect;x",
                                    "cdckit_lab/../planted_factory:connect"])
def test_a_factory_outside_the_lab_is_refused_at_validation_and_never_imported(target: str, planted: Path) -> None:
    (problem,) = problems_of({**SQLSERVER, FACTORY: target})
    assert problem.startswith(f"{FACTORY}={target!r} is refused: it is a test seam that imports and runs the module")
    assert "cdckit_lab.<module>:<function>" in problem and "\n" not in problem
    with pytest.raises(SourceConnectionError, match="is refused: it is a test seam"):  # options not validated
        connect({**SQLSERVER, FACTORY: target})
    assert not planted.exists()


def test_the_lab_models_factory_is_accepted_and_connects(tmp_path: Path) -> None:
    folder = tmp_path / "a;b}c"  # a path ODBC must keep braced
    folder.mkdir()
    model = SqlServerModel(folder / "sqlserver.sqlite")
    model.create_database("testDB")
    model.enable_cdc("testDB")
    options = {**SQLSERVER, FACTORY: "cdckit_lab.sqlserver_model:connect",
               "cdckit.sqlserver.model.path": str(model.path)}
    config = validate(options)
    with connect(config.as_properties(include_secrets=True), "testDB") as conn:
        assert conn.cursor().execute(queries.DATABASE_CDC_ENABLED, "testDB").fetchone()[0] is True


def test_the_models_file_without_the_models_factory_is_refused() -> None:
    (problem,) = problems_of({**SQLSERVER, "cdckit.sqlserver.model.path": "sqlserver.sqlite"})
    assert problem.startswith("cdckit.sqlserver.model.path is read by the lab's model of SQL Server only")


def test_a_lab_factory_without_the_lab_installed_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cdckit_lab.not_installed", None)  # import fails as if absent
    with pytest.raises(SourceConnectionError) as refused:
        connect({**SQLSERVER, FACTORY: "cdckit_lab.not_installed:connect"})
    assert "cannot be loaded" in str(refused.value) and "cdckit-lab" in str(refused.value)


# -- the ODBC connection string -----------------------------------------------------------------------------------


@pytest.mark.parametrize("hostname", ["db;Encrypt=no", "db};Encrypt={no", "db;TrustServerCertificate=yes;x={",
                                      "db}}};Encrypt=no;APP={x"])
def test_a_host_name_cannot_add_attributes_or_turn_encryption_off(hostname: str) -> None:
    text = connection_string({**SQLSERVER, "database.hostname": hostname, "database.applicationIntent": "ReadOnly"})
    items = parse_connection_string(text)  # as ODBC reads it
    assert list(items) == ["DRIVER", "SERVER", "DATABASE", "UID", "PWD", "ENCRYPT", "TRUSTSERVERCERTIFICATE", "APP",
                           "APPLICATIONINTENT"]
    assert items["SERVER"] == f"{hostname},1433"
    assert items["ENCRYPT"] == "yes" and items["TRUSTSERVERCERTIFICATE"] == "no"


def test_every_value_of_the_connection_string_is_braced() -> None:
    text = connection_string({**SQLSERVER, "database.applicationIntent": "ReadOnly", "database.port": "1444",
                              "cdckit.sqlserver.model.path": "/m;x"}, "db}1")
    assert text == ("DRIVER={ODBC Driver 18 for SQL Server};SERVER={sql.example.com,1444};DATABASE={db}}1};UID={cdc};"
                    "PWD={Pw-0f-the-login};Encrypt={yes};TrustServerCertificate={no};APP={cdckit};"
                    "ApplicationIntent={ReadOnly};MODEL={/m;x}")


def test_pyodbc_gets_the_braced_string(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setitem(sys.modules, "pyodbc", types.SimpleNamespace(
        connect=lambda text, **kwargs: seen.append(text) or types.SimpleNamespace(autocommit=False)))
    connect({**SQLSERVER, "database.hostname": "db;Encrypt=no"})
    assert parse_connection_string(seen[0])["ENCRYPT"] == "yes"
    assert seen[0].startswith("DRIVER={ODBC Driver 18 for SQL Server};SERVER={db;Encrypt=no,1433};")


# -- PostgreSQL: database.sslmode and database.sslrootcert --------------------------------------------------------


def _libpq_arguments(monkeypatch: pytest.MonkeyPatch, settings: dict[str, str]) -> dict[str, Any]:
    """What psycopg2.connect receives for a validated configuration (no server: the call is recorded)."""
    seen: dict[str, Any] = {}

    def record(**kwargs: Any) -> Any:
        seen.update(kwargs)
        raise pg.psycopg2.OperationalError("recorded")

    monkeypatch.setattr(pg.psycopg2, "connect", record)
    options = validate({**POSTGRES, **settings}).as_properties(include_secrets=True)
    with pytest.raises(SourceConnectionError):
        pg.connect(options)
    return seen


def test_sslmode_defaults_to_prefer_as_in_debezium(monkeypatch: pytest.MonkeyPatch) -> None:
    arguments = _libpq_arguments(monkeypatch, {})
    assert arguments["sslmode"] == "prefer" and "sslrootcert" not in arguments


def test_verify_full_and_a_ca_file_reach_libpq(monkeypatch: pytest.MonkeyPatch) -> None:
    arguments = _libpq_arguments(monkeypatch, {"database.sslmode": "verify-full",
                                               "database.sslrootcert": "/etc/cdckit/rds-ca.pem"})
    assert arguments["sslmode"] == "verify-full" and arguments["sslrootcert"] == "/etc/cdckit/rds-ca.pem"


def test_sslrootcert_system_is_the_machines_trust_store_and_verify_full(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text("")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setattr(pg, "SYSTEM_CA_FILES", (str(tmp_path / "absent.crt"), str(bundle)))
    arguments = _libpq_arguments(monkeypatch, {"database.sslrootcert": "system"})
    assert arguments["sslmode"] == "verify-full" and arguments["sslrootcert"] == str(bundle)
    monkeypatch.setenv("SSL_CERT_FILE", "/opt/ca/bundle.pem")  # OpenSSL's own way to name the store
    assert _libpq_arguments(monkeypatch, {"database.sslrootcert": "system", "database.sslmode": "verify-full"}
                            )["sslrootcert"] == "/opt/ca/bundle.pem"


def test_sslrootcert_system_on_a_machine_without_a_trust_store_says_what_to_do(monkeypatch: pytest.MonkeyPatch,
                                                                               tmp_path: Path) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setattr(pg, "SYSTEM_CA_FILES", (str(tmp_path / "absent.crt"),))
    options = validate({**POSTGRES, "database.sslrootcert": "system"}).as_properties(include_secrets=True)
    with pytest.raises(SourceConnectionError) as refused:
        pg.connect(options)
    message = str(refused.value)
    assert message.startswith("database.sslrootcert=system: this machine has no system trust store")
    assert "SSL_CERT_FILE" in message and "\n" not in message


@pytest.mark.parametrize("mode", ["disable", "allow", "prefer", "require", "verify-ca"])
def test_sslrootcert_system_with_a_weaker_sslmode_is_refused(mode: str) -> None:
    (problem,) = problems_of({**POSTGRES, "database.sslrootcert": "system", "database.sslmode": mode})
    assert problem == (f"database.sslrootcert=system checks the server against the machine's trust store, which "
                       f"libpq allows only with database.sslmode=verify-full, not {mode}; set "
                       f"database.sslmode=verify-full")
