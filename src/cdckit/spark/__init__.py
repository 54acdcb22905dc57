"""The Spark side: data sources for snapshots and changes, and the sinks."""
