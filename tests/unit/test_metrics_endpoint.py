"""The driver's Prometheus endpoint under hostile clients: it listens on the loopback unless told otherwise, holds at
most ``cdckit.metrics.max.connections`` threads whatever clients do, drops a client that does not send its request
within ``cdckit.metrics.timeout.ms``, and answers a normal scrape afterwards.

The finding this reproduces: prometheus_client's ``start_http_server`` bound 0.0.0.0 and started a thread for every
connection without a timeout, so 500 half-sent requests held 502 driver threads indefinitely."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from cdckit.config import validate
from cdckit.errors import CdcKitError, ConfigurationError
from cdckit.observe.metrics import ConnectorMetrics
from cdckit.observe.prometheus import Endpoint
from cdckit.observe.publish import Observer

CAP = 3
TIMEOUT_S = 1.0
SLOW_CLIENTS = 200
BASE = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "database.hostname": "db",
        "database.user": "u", "database.password": "p", "database.dbname": "shop", "topic.prefix": "t"}


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    served = Endpoint(ConnectorMetrics("sqlserver", "server1", ["testDB"]), _free_port(), timeout_s=TIMEOUT_S,
                      max_connections=CAP)
    yield served
    served.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closed (or reset) the connection within ``within_s``."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _request_threads() -> int:
    return sum(1 for thread in threading.enumerate() if "process_request_thread" in thread.name)


def test_half_sent_requests_hold_at_most_the_cap_of_threads_and_are_dropped_after_the_timeout(
        endpoint: Endpoint) -> None:
    assert endpoint.server.server_address[0] == "127.0.0.1"
    before = threading.active_count()
    slow = []
    try:
        for _ in range(SLOW_CLIENTS):
            sock = socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)
            sock.sendall(b"GET /metr")  # a partial request line, then nothing
            slow.append(sock)
        time.sleep(0.3)
        assert _request_threads() <= CAP
        assert threading.active_count() - before <= CAP
        started = time.monotonic()
        # the ones beyond the cap were closed when accepted, the others after the timeout
        assert all(_closed_by_server(sock, 3 * TIMEOUT_S) for sock in slow)
        assert time.monotonic() - started < 3 * TIMEOUT_S
        assert 'debezium_metrics_Connected{context="streaming",database="testDB"' in _scrape(endpoint.port)
    finally:
        for sock in slow:
            sock.close()
    deadline = time.monotonic() + 5
    while _request_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _request_threads() == 0


def test_a_request_sent_a_byte_at_a_time_is_dropped_at_the_timeout_whatever_it_sends(endpoint: Endpoint) -> None:
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as sock:
        started = time.monotonic()
        dropped = False
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            if _closed_by_server(sock, 0.2):
                dropped = True
                break
        assert dropped
        assert time.monotonic() - started < TIMEOUT_S + 1.0
    assert "debezium_metrics_" in _scrape(endpoint.port)


def test_while_slow_clients_hold_every_slot_a_further_client_is_closed_without_a_thread(endpoint: Endpoint) -> None:
    with contextlib.ExitStack() as stack:
        for _ in range(CAP):
            stack.enter_context(socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)).sendall(b"G")
        time.sleep(0.2)
        extra = stack.enter_context(socket.create_connection(("127.0.0.1", endpoint.port), timeout=5))
        assert _closed_by_server(extra, TIMEOUT_S / 2)  # at once, long before the timeout
        assert _request_threads() == CAP
    time.sleep(TIMEOUT_S + 0.5)
    assert "debezium_metrics_" in _scrape(endpoint.port)


def test_the_endpoint_listens_on_the_loopback_unless_another_address_is_set() -> None:
    metrics = ConnectorMetrics("postgresql", "it", ["inventory"])
    served = Endpoint(metrics, _free_port())
    try:
        assert served.server.server_address[0] == "127.0.0.1"
    finally:
        served.close()
    served = Endpoint(metrics, _free_port(), host="0.0.0.0")
    try:
        assert served.server.server_address[0] == "0.0.0.0"
        assert "debezium_metrics_" in _scrape(served.port)
    finally:
        served.close()
    with pytest.raises(CdcKitError, match=r"cdckit.metrics.host=192.0.2.7, cdckit.metrics.port=\d+: the driver "
                                          r"cannot serve metrics there .*an address of this machine"):
        Endpoint(metrics, _free_port(), host="192.0.2.7")  # TEST-NET-1: no interface of this machine


def test_the_observer_serves_on_the_configured_address_with_the_configured_limits(tmp_path: object) -> None:
    options = validate({**BASE, "cdckit.metrics.port": str(_free_port()), "cdckit.checkpoint.location": str(tmp_path),
                        "cdckit.metrics.timeout.ms": "1500", "cdckit.metrics.max.connections": "2"}
                       ).as_properties()
    assert options["cdckit.metrics.host"] == "127.0.0.1"  # the default
    observer = Observer(options, ["shop"], json_lines=False)
    try:
        server = observer.endpoint.server
        assert server.server_address[0] == "127.0.0.1"
        assert server.RequestHandlerClass.timeout == 1.5
        assert server.slots._initial_value == 2  # type: ignore[attr-defined]
    finally:
        observer.close()


@pytest.mark.parametrize(("settings", "problem"), [
    ({"cdckit.metrics.port": "9404", "cdckit.metrics.host": "not a host"},
     "cdckit.metrics.host='not a host' is neither an IP address nor a host name"),
    ({"cdckit.metrics.host": "0.0.0.0"},
     "cdckit.metrics.host configures the Prometheus endpoint, which cdckit.metrics.port=0 turns off"),
    ({"cdckit.metrics.max.connections": "4"},
     "cdckit.metrics.max.connections configures the Prometheus endpoint, which cdckit.metrics.port=0 turns off"),
    ({"cdckit.metrics.port": "9404", "cdckit.metrics.timeout.ms": "10"},
     "cdckit.metrics.timeout.ms=10 is below the minimum 100"),
    ({"cdckit.metrics.port": "9404", "cdckit.metrics.max.connections": "0"},
     "cdckit.metrics.max.connections=0 is below the minimum 1"),
])
def test_endpoint_settings_are_checked(settings: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate({**BASE, **settings})
    assert any(problem in found for found in refused.value.problems), refused.value.problems


def test_endpoint_settings_are_accepted_with_a_port_and_their_defaults_without_one() -> None:
    config = validate({**BASE, "cdckit.metrics.port": "9404", "cdckit.metrics.host": "metrics.pod.local",
                       "cdckit.metrics.timeout.ms": "5000", "cdckit.metrics.max.connections": "4"})
    assert config.str("cdckit.metrics.host") == "metrics.pod.local"
    assert validate({**BASE, "cdckit.metrics.host": "127.0.0.1"}).int("cdckit.metrics.port") == 0
    assert validate({**BASE, "cdckit.metrics.port": "9404", "cdckit.metrics.host": "::"}).str(
        "cdckit.metrics.host") == "::"
