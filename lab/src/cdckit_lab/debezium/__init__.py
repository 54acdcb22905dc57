"""Debezium's own PostgreSQL connector (in Debezium Server, or its embedded engine), run beside cdckit on the same
PostgreSQL and Kafka: ``runtime`` fetches it, ``server`` runs it, ``topics`` counts and reads its records, and
``cdckit_side`` and ``compare`` hold cdckit's records against them; ``selfcheck`` (``python -m
cdckit_lab.debezium``) does all of it once and says what differs."""

from cdckit_lab.debezium.runtime import FORMAT_VERSION, VERSION
from cdckit_lab.debezium.selfcheck import EDGE_ROWS
from cdckit_lab.debezium.server import create_slot, run_debezium
from cdckit_lab.debezium.topics import EndOffsets, ensure_topic, read_records

__all__ = ["EDGE_ROWS", "FORMAT_VERSION", "VERSION", "EndOffsets", "create_slot", "ensure_topic", "read_records",
           "run_debezium"]
