"""cdckit's lab: what drives cdckit from outside, as a user or a test does, and is never installed on a cluster.

The demo (``cdckit demo``), an embedded PostgreSQL, a model of SQL Server's CDC objects, Debezium side by side
and its parity corpus, a local Kafka broker and Spark standalone cluster, the soak and the monitoring watch.
"""
