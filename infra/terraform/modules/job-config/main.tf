# The connector configuration of the jobs, from the other modules' outputs: no provider, so `terraform validate`
# checks it offline. make deploy writes `connector` as the jobs' JSON configuration file.
locals {
  sqlserver = var.connector == "sqlserver"
  source = local.sqlserver ? {
    "connector.class" = "io.debezium.connector.sqlserver.SqlServerConnector"
    "database.names"  = join(",", var.database_names)
    } : {
    "connector.class" = "io.debezium.connector.postgresql.PostgresConnector"
    "database.dbname" = var.database_names[0]
    "slot.name"       = var.slot_name
    # TLS with the server's certificate checked, name included, against the system's trust store, where the job
    # image has Amazon RDS's certificate authorities (containers/job/install.sh); SQL Server's driver does the same
    # by default (database.encrypt=true)
    "database.sslmode"     = "verify-full"
    "database.sslrootcert" = "system"
  }
  kafka = var.kafka_bootstrap_servers == null ? {} : {
    "cdckit.sink"                              = "kafka"
    "kafka.bootstrap.servers"                  = var.kafka_bootstrap_servers
    "kafka.security.protocol"                  = "SASL_SSL"
    "kafka.sasl.mechanism"                     = "AWS_MSK_IAM"
    "kafka.sasl.jaas.config"                   = "software.amazon.msk.auth.iam.IAMLoginModule required;"
    "kafka.sasl.client.callback.handler.class" = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
    # as many copies as the cluster has brokers, up to 3: a 2-broker dev cluster refuses a factor of 3
    "topic.creation.default.replication.factor" = tostring(min(3, var.kafka_broker_count))
  }
  connector = merge(local.source, {
    "name"                       = var.name
    "topic.prefix"               = var.topic_prefix
    "database.hostname"          = var.database_hostname
    "database.port"              = tostring(var.database_port)
    "database.user"              = "$${secret:${var.database_secret_arn}:username}"
    "database.password"          = "$${secret:${var.database_secret_arn}:password}"
    "table.include.list"         = join(",", var.table_include_list)
    "cdckit.checkpoint.location" = "${var.checkpoint_uri}/${var.name}"
    "cdckit.delta.path"          = var.delta_uri
    "cdckit.trigger"             = "processing-time"
    # Debezium's metrics to CloudWatch after every batch (the alarms and dashboard of the monitoring module)
    "cdckit.metrics.cloudwatch.namespace" = var.metrics_namespace
  }, local.kafka, var.extra_properties)
}
