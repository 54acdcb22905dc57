"""``make kafka`` (``python -m cdckit_lab.kafka_broker``): its address where a connector can read it, and no broker
left running after it, whether it is stopped with SIGTERM or killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _broker_pids(folder: Path) -> list[int]:
    """The JVMs running a broker of ``folder`` (their command line names its server.properties)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kafka.Kafka" in command and str(folder / "server.properties").encode() in command:
                pids.append(int(entry.name))
    return pids


def _gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in pids):
            return True
        time.sleep(0.2)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _start(folder: Path) -> tuple[subprocess.Popen[str], str]:
    wrapper = subprocess.Popen([sys.executable, "-m", "cdckit_lab.kafka_broker", str(folder)], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    address_file = folder / "bootstrap.servers"
    deadline = time.monotonic() + 180
    while not address_file.exists():
        assert wrapper.poll() is None, wrapper.stdout.read() if wrapper.stdout else ""
        assert time.monotonic() < deadline, "the broker did not start"
        time.sleep(0.2)
    return wrapper, address_file.read_text().strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "killed"])
def test_the_broker_says_its_address_and_ends_with_its_wrapper(tmp_path: Path, stop: signal.Signals) -> None:
    folder = tmp_path / "kafka"
    wrapper, address = _start(folder)
    try:
        host, _, port = address.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5):
            pass
        from confluent_kafka.admin import AdminClient

        assert AdminClient({"bootstrap.servers": address}).list_topics(timeout=10).brokers
        assert wrapper.stdout is not None
        said = [wrapper.stdout.readline() for _ in range(3)]
        assert f"  --set kafka.bootstrap.servers={address}\n" in said, said
        jvms = _broker_pids(folder.resolve())
        assert len(jvms) == 1
        os.kill(wrapper.pid, stop)
        wrapper.wait(60)
        assert _gone(jvms, 60), f"the broker's JVM {jvms} still runs after the wrapper got {stop.name}"
        if stop == signal.SIGTERM:
            assert wrapper.returncode == 0
            assert not (folder / "bootstrap.servers").exists()  # no address of a broker that is not there
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
        for pid in _broker_pids(folder.resolve()):
            os.kill(pid, signal.SIGKILL)
