"""cdckit: change data capture as Spark jobs, emitting Debezium-compatible change events."""

__version__ = "0.1.0"
