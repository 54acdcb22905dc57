"""The properties cdckit understands: Debezium's own names and defaults, plus cdckit's ``cdckit.*`` keys.

Each property is one row of ``PROPERTIES``; validation, defaults, documentation (``cdckit properties``) and
redaction all read this table, so adding a property is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cdckit.config.secrets import is_secret_name

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
YUGABYTEDB_CONNECTOR = "io.debezium.connector.postgresql.YugabyteDBConnector"
SQLSERVER_CONNECTOR = "io.debezium.connector.sqlserver.SqlServerConnector"
SUPPORTED_CONNECTORS = (POSTGRES_CONNECTOR, YUGABYTEDB_CONNECTOR, SQLSERVER_CONNECTOR)
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"


@dataclass(frozen=True)
class Property:
    name: str
    kind: str  # string | int | bool | choice | list | password
    default: object = None
    doc: str = ""
    choices: tuple[str, ...] = ()
    required: bool = False
    minimum: int | None = None
    # a default that depends on the connector class (YugabyteDB differs from PostgreSQL)
    default_for: Callable[[str], object] | None = None
    # which connectors read it: "" all, "sqlserver" SQL Server only, "postgres" PostgreSQL and YugabyteDB only;
    # set for another connector it is refused (it would do nothing)
    only: str = ""

    @property
    def secret(self) -> bool:
        """Its value is hidden wherever it is shown (``cdckit.config.secrets``)."""
        return self.kind == "password" or is_secret_name(self.name)


def _port_default(connector_class: str) -> int:
    return {YUGABYTEDB_CONNECTOR: 5433, SQLSERVER_CONNECTOR: 1433}.get(connector_class, 5432)


PROPERTIES: tuple[Property, ...] = (
    # -- identity and connection ------------------------------------------------------------------
    Property("name", "string", None, "connector name (informational)"),
    Property("connector.class", "choice", None, "source connector", choices=SUPPORTED_CONNECTORS, required=True),
    Property("tasks.max", "int", 1, "1 only: one cdckit job reads every table and database; its parallelism is "
             "Spark's", minimum=1),
    Property("database.hostname", "string", None, "database host name or IP address", required=True),
    Property("database.port", "int", None, "database port (5432; 5433 for YugabyteDB)", minimum=1,
             default_for=_port_default),
    Property("database.user", "string", None, "user with REPLICATION and SELECT privileges", required=True),
    Property("database.password", "password", None, "password of database.user", required=True),
    Property("database.dbname", "string", None, "database to capture (PostgreSQL, YugabyteDB)", only="postgres"),
    Property("database.names", "list", (), "databases to capture (SQL Server)", only="sqlserver"),
    Property("database.encrypt", "bool", True, "SQL Server: encrypt the connection (TLS)", only="sqlserver"),
    Property("database.trustServerCertificate", "bool", False, "SQL Server: accept the server's certificate "
             "without validating it", only="sqlserver"),
    Property("database.applicationIntent", "choice", None, "SQL Server: ReadOnly to read from an Always On "
             "secondary", choices=("ReadOnly", "ReadWrite"), only="sqlserver"),
    Property("database.driver", "string", "ODBC Driver 18 for SQL Server", "SQL Server: the ODBC driver name",
             only="sqlserver"),
    Property("database.instance", "string", None, "SQL Server: a named instance; without database.port the SQL "
             "Server Browser finds its port (SERVER=host\\instance), with it that port is used (host\\instance,port)",
             only="sqlserver"),
    Property("database.sslmode", "choice", "prefer", "libpq sslmode",
             choices=("disable", "allow", "prefer", "require", "verify-ca", "verify-full"), only="postgres"),
    Property("database.sslrootcert", "string", None, "CA certificate file for verify-ca / verify-full, or system: "
             "the machine's trust store (SSL_CERT_FILE, else the distribution's CA bundle), with verify-full only, "
             "its default then (as libpq)", only="postgres"),
    Property("database.connect.timeout.ms", "int", 30000, "connection timeout", minimum=1000),
    Property("topic.prefix", "string", None, "namespace of topic and schema names; never change it",
             required=True),
    # -- what to capture ----------------------------------------------------------------------------
    Property("schema.include.list", "list", (), "regular expressions of schemas to capture"),
    Property("schema.exclude.list", "list", (), "regular expressions of schemas not to capture"),
    Property("table.include.list", "list", (), "regular expressions of schema.table to capture"),
    Property("table.exclude.list", "list", (), "regular expressions of schema.table not to capture"),
    Property("column.include.list", "list", (), "regular expressions of schema.table.column to emit"),
    Property("column.exclude.list", "list", (), "regular expressions of schema.table.column not to emit"),
    # -- replication --------------------------------------------------------------------------------
    Property("plugin.name", "choice", "pgoutput", "logical decoding output plugin (yboutput: YugabyteDB only)",
             choices=("pgoutput", "yboutput"), only="postgres"),
    Property("slot.name", "string", "debezium", "logical replication slot ([a-z0-9_])", only="postgres"),
    Property("slot.drop.on.stop", "bool", False, "drop the slot when the stream stops (tests only)", only="postgres"),
    Property("publication.name", "string", "dbz_publication", "publication streamed from", only="postgres"),
    Property("publication.autocreate.mode", "choice", "all_tables", "how the publication is created",
             choices=("all_tables", "disabled", "filtered"), only="postgres"),
    Property("snapshot.mode", "choice", "initial", "when to snapshot (when_needed: also when the slot can no longer "
             "continue from the checkpoint; PostgreSQL/YugabyteDB)",
             choices=("initial", "initial_only", "never", "no_data", "schema_only", "when_needed")),
    Property("snapshot.select.statement.overrides", "list", (), "SQL Server: schema.table names whose snapshot "
             "uses the SELECT in snapshot.select.statement.overrides.<schema>.<table>", only="sqlserver"),
    Property("snapshot.isolation.mode", "choice", "repeatable_read", "SQL Server: isolation of snapshot reads",
             choices=("read_uncommitted", "read_committed", "repeatable_read", "snapshot", "exclusive"),
             only="sqlserver"),
    Property("max.iteration.transactions", "int", 0, "SQL Server: transactions per micro-batch at most "
             "(0 = no limit)", minimum=0, only="sqlserver"),
    Property("data.query.mode", "choice", "direct", "SQL Server: how changes are read; direct (Debezium's default) "
             "reads the change tables ordered by __$command_id; function is refused (docs/decisions/0032)",
             choices=("direct", "function"), only="sqlserver"),
    Property("snapshot.fetch.size", "int", 10240, "rows read at a time while snapshotting: a round trip of a "
             "query, or a block of a PostgreSQL chunk's COPY output formatted at once", minimum=1),
    Property("max.batch.size", "int", None, "change events admitted per micro-batch at most (whole "
             "transactions); unset, the bound adapts: 2048 (Debezium's default) while the stream is caught up, "
             "growing toward 2 s batches of up to 200000 through a backlog (docs/decisions/0038)", minimum=1),
    Property("poll.interval.ms", "int", 500, "how long a micro-batch that finds no change pending waits for "
             "one (processing-time trigger at its default interval)", minimum=1),
    Property("heartbeat.interval.ms", "int", 0, "heartbeat period (0 = off); keeps an idle slot moving",
             minimum=0),
    Property("topic.heartbeat.prefix", "string", "__debezium-heartbeat", "prefix of the heartbeat topic"),
    Property("tombstones.on.delete", "bool", True, "emit a tombstone after each delete"),
    Property("skipped.operations", "list", ("t",), "operations not emitted: c, u, d, t, or none"),
    Property("time.precision.mode", "choice", "adaptive", "temporal representation",
             choices=("adaptive", "adaptive_time_microseconds", "connect")),
    Property("decimal.handling.mode", "choice", "precise", "numeric representation",
             choices=("precise", "double", "string")),
    Property("binary.handling.mode", "choice", "bytes", "bytea representation",
             choices=("bytes", "base64", "base64-url-safe", "hex")),
    Property("interval.handling.mode", "choice", "numeric", "interval representation",
             choices=("numeric", "string"), only="postgres"),
    Property("hstore.handling.mode", "choice", "json", "hstore representation", choices=("json", "map"),
             only="postgres"),
    Property("schema.name.adjustment.mode", "choice", "none", "make schema names Avro-safe",
             choices=("none", "avro", "avro_unicode")),
    Property("field.name.adjustment.mode", "choice", "none", "make field names Avro-safe",
             choices=("none", "avro", "avro_unicode")),
    Property("message.key.columns", "string", "", "custom keys: <schema.table regex>:<col>,<col>;..."),
    Property("provide.transaction.metadata", "bool", False, "BEGIN/END records and the transaction block"),
    Property("topic.transaction", "string", "transaction", "suffix of the transaction metadata topic"),
    Property("include.schema.changes", "bool", None, "schema change records on the topic.prefix topic "
             "(default true for SQL Server; an extension for PostgreSQL, default false)",
             default_for=lambda connector_class: connector_class.endswith("SqlServerConnector")),
    Property("snapshot.include.collection.list", "list", (), "SQL Server: regular expressions (anchored) of "
             "<database>.<schema>.<table> naming the captured tables to snapshot (default: all); the others are "
             "streamed from the snapshot's start without a snapshot", only="sqlserver"),
    Property("snapshot.lock.timeout.ms", "int", 10000, "SQL Server: how long a snapshot read waits for a lock "
             "(snapshot.isolation.mode repeatable_read or exclusive; SET LOCK_TIMEOUT) before the snapshot fails; "
             "-1 waits forever, 0 fails at once", minimum=-1, only="sqlserver"),
    Property("source.struct.version", "choice", "v2", "layout of the source block: v2 (v1, the layout before "
             "Debezium 0.10, is refused)", choices=("v1", "v2")),
    Property("event.processing.failure.handling.mode", "choice", "fail", "an event that cannot be processed stops "
             "the job, naming it (fail); warn, skip and ignore are refused",
             choices=("fail", "warn", "skip", "ignore")),
    Property("retriable.restart.connector.wait.ms", "int", 10000, "Debezium's wait before restarting after a "
             "retriable error: cdckit does not restart itself; the deployed stream's restart policy waits 10 s, this "
             "default; another value is refused", minimum=1),
    Property("converters", "string", "", "Kafka Connect custom converters (Java classes): refused, see "
             "docs/decisions/0034"),
    # -- converters ---------------------------------------------------------------------------------
    Property("key.converter", "choice", JSON_CONVERTER, "key converter", choices=(JSON_CONVERTER,)),
    Property("value.converter", "choice", JSON_CONVERTER, "value converter", choices=(JSON_CONVERTER,)),
    Property("key.converter.schemas.enable", "bool", True, "JsonConverter writes the key schema"),
    Property("value.converter.schemas.enable", "bool", True, "JsonConverter writes the value schema"),
    # -- cdckit: the Spark side ---------------------------------------------------------------------
    Property("cdckit.message.format", "choice", "debezium", "message format: Debezium envelopes or Qlik Replicate "
             "messages", choices=("debezium", "qlik")),
    Property("cdckit.debezium.format", "choice", "2.5", "whose Debezium records to reproduce: 2.5 (Debezium "
             "2.5.2.Final's) or 3.6 (Debezium 3.6.0.Final's: ts_us/ts_ns, the transaction block before op, versioned "
             "source and Envelope schemas, source.origin); see docs/decisions/0028", choices=("2.5", "3.6")),
    Property("cdckit.qlik.encoding", "choice", "json", "Qlik message encoding", choices=("json", "avro")),
    Property("cdckit.qlik.task", "string", "", "Qlik lineage.task (default: the connector name)"),
    Property("cdckit.qlik.server", "string", "", "Qlik lineage.server (default: topic.prefix)"),
    Property("cdckit.sink", "choice", "files", "where events go", choices=("files", "console", "kafka",
                                                                        "eventhubs", "delta")),
    Property("topic.creation.enable", "bool", True, "create missing topics (else they must exist)"),
    Property("topic.creation.default.partitions", "int", -1, "partitions of created topics (-1: broker default)"),
    Property("topic.creation.default.replication.factor", "int", -1, "replication factor of created topics "
             "(-1: broker default)"),
    Property("topic.creation.default.cleanup.policy", "string", "", "cleanup.policy of created topics (e.g. "
             "compact)"),
    Property("cdckit.kafka.max.message.bytes", "int", 0, "largest record sent (0: no check; Event Hubs: the "
             "tier's limit)", minimum=0),
    Property("cdckit.kafka.oversize.handling", "choice", "fail", "a larger record: fail the batch, or write it to "
             "<output>/_dead-letter", choices=("fail", "dead-letter")),
    Property("cdckit.eventhubs.namespace", "string", "", "Event Hubs namespace (<namespace>.servicebus.windows.net)"),
    Property("cdckit.eventhubs.connection.string", "password", None, "Event Hubs connection string (SAS)"),
    Property("cdckit.eventhubs.auth", "choice", "connection-string", "Event Hubs authentication (oauthbearer: "
             "set kafka.sasl.jaas.config and kafka.sasl.login.callback.handler.class)",
             choices=("connection-string", "oauthbearer")),
    Property("cdckit.eventhubs.tier", "choice", "standard", "Event Hubs tier (limits: basic 256 KB events and no "
             "compaction; others 1 MB)", choices=("basic", "standard", "premium", "dedicated")),
    Property("cdckit.output.path", "string", "cdckit-output", "folder of the files sink"),
    Property("cdckit.files.mode", "string", "600", "permissions (octal) of the files the files sink writes, which "
             "hold the captured rows; their folders, and Spark's checkpoint files on a local or HDFS file system, "
             "get the matching mode (600: 700 folders, Spark's umask 077; 640: 750, 027)"),
    Property("cdckit.files.direct.writes", "choice", "auto", "whether the files sink writes its files past the "
             "page cache (O_DIRECT): auto on a local disk's file system (ext4, XFS, Btrfs) only; true wherever the "
             "platform has O_DIRECT (a file system that refuses it is written through the page cache); false "
             "never; see docs/decisions/0039", choices=("auto", "true", "false")),
    Property("cdckit.delta.path", "string", "cdckit-delta", "folder (or s3:// URI) of the Delta sink's tables: "
             "changes/<topic> and state/<topic>"),
    Property("cdckit.delta.mode", "choice", "both", "Delta tables kept per captured table: the change table, the "
             "current-state table (MERGE), or both", choices=("changes", "state", "both")),
    Property("cdckit.delta.partition.columns", "string", "", "columns the change tables are partitioned by when "
             "created (comma-separated; each must be a column of every captured table, or __op)"),
    Property("cdckit.checkpoint.location", "string", "cdckit-checkpoint",
             "folder for the stream's Spark checkpoint and the snapshot's state"),
    Property("cdckit.local.paths.shared", "bool", False,
             "local paths (cdckit.output.path, cdckit.delta.path, cdckit.checkpoint.location) "
             "are on a filesystem every Spark node mounts at the same place (NFS, EFS); without it a local path is "
             "refused when executors run on other machines"),
    Property("cdckit.trigger", "choice", "available-now", "available-now: process what exists and stop; "
             "processing-time: run continuously", choices=("available-now", "processing-time")),
    Property("cdckit.trigger.interval", "string", "", "micro-batch interval for processing-time "
             "(e.g. '10 seconds'; empty = back to back, each waiting up to poll.interval.ms for a change)"),
    Property("cdckit.snapshot.chunk.rows", "int", 50000, "target rows per snapshot partition", minimum=1),
    Property("cdckit.sqlserver.purged.changes", "choice", "fail", "SQL Server: when the cleanup job removed "
             "changes cdckit had not read: fail (stop with an error) or resnapshot (take an incremental snapshot of "
             "the table and stream on)", choices=("fail", "resnapshot"), only="sqlserver"),
    Property("signal.data.collection", "string", "", "the signalling table whose inserts are Debezium signals "
             "(execute-snapshot, stop-snapshot, pause-snapshot, resume-snapshot): SQL Server <db>.<schema>.<table>, "
             "CDC-enabled (sql/sqlserver/06_signal_table.sql); PostgreSQL <schema>.<table>, in the publication "
             "(sql/postgres/03_signal_table.sql)"),
    Property("incremental.snapshot.chunk.size", "int", 1024, "rows per chunk of an ad hoc incremental snapshot",
             minimum=1),
    Property("cdckit.incremental.snapshot.query.timeout.ms", "int", 300000, "the longest an ad hoc incremental "
             "snapshot's chunk query may run (0 = no limit); a chunk whose signal's additional condition runs longer "
             "is reported and skipped", minimum=0),
    Property("cdckit.sqlserver.schema.evolution", "choice", "job", "SQL Server: who rotates capture instances "
             "after a schema change: job (cdckit schema-evolution, on a schedule) or stream (the stream, before "
             "every batch)", choices=("job", "stream"), only="sqlserver"),
    Property("cdckit.sqlserver.cdc.role", "string", "", "SQL Server: gating role of capture instances the "
             "schema-evolution job creates (empty: none)", only="sqlserver"),
    Property("cdckit.sqlserver.connection.factory", "string", "", "test seam: a function of the lab's "
             "distribution (cdckit_lab.<module>:<function>, e.g. the SQL Server model's cdckit_lab.sqlserver_model:"
             "connect) called instead of pyodbc.connect; any other module is refused", only="sqlserver"),
    Property("cdckit.sqlserver.model.path", "string", "", "state file of the in-process SQL Server model (tests, "
             "with cdckit.sqlserver.connection.factory)", only="sqlserver"),
    Property("cdckit.stream.partitions", "int", 0, "PostgreSQL/YugabyteDB: Spark tasks that read a large "
             "micro-batch at once, each a range of whole transactions (0 = Spark's default parallelism; 1 into "
             "Kafka, which then gets each batch in one pass)",
             minimum=0, only="postgres"),
    Property("cdckit.stream.partition.min.events", "int", 5000, "PostgreSQL/YugabyteDB: a micro-batch is cut "
             "into partitions only where each keeps at least this many changes", minimum=1, only="postgres"),
    Property("cdckit.stream.max.batches", "int", 0, "stop the stream after this many micro-batches "
             "(0 = no limit)", minimum=0),
    # -- metrics (docs/monitoring.md) -------------------------------------------------------------------
    Property("cdckit.metrics.port", "int", 0, "port of the driver's Prometheus endpoint (/metrics) with "
             "Debezium's metrics (0 = none)", minimum=0),
    Property("cdckit.metrics.host", "string", "127.0.0.1", "address the Prometheus endpoint listens on: the "
             "loopback by default (this machine only); where Prometheus scrapes the driver from another host "
             "(Kubernetes, EMR) 0.0.0.0 (every interface) or the pod's or node's address"),
    Property("cdckit.metrics.timeout.ms", "int", 10000, "the Prometheus endpoint drops a connection that has not "
             "sent its whole request within this time, or does not take the answer within it", minimum=100),
    Property("cdckit.metrics.max.connections", "int", 8, "connections the Prometheus endpoint serves at once, each "
             "on a thread of the driver; more are closed at once", minimum=1),
    Property("cdckit.metrics.log", "bool", False, "a JSON line of the metrics ({\"cdckit.metrics\": {...}}) on the "
             "driver's stderr after each batch and snapshot, for a log pipeline to parse (cdckit --verbose turns it "
             "on too)"),
    Property("cdckit.metrics.cloudwatch.namespace", "string", "", "CloudWatch namespace the driver sends "
             "Debezium's metrics to after each batch, through boto3 (empty = none)"),
    Property("custom.metric.tags", "string", "", "k1=v1,k2=v2: labels (Prometheus) and dimensions (CloudWatch) "
             "added to every metric, as Debezium appends them to its MBean names"),
)

BY_NAME = {prop.name: prop for prop in PROPERTIES}

# Pass-through families kept for the sinks and converters (validated where they are used).
PASSTHROUGH_PREFIXES = ("kafka.", "spark.")
