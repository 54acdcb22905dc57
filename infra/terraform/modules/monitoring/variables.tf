variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "application_id" {
  description = "EMR Serverless application of the jobs."
  type        = string
}

variable "postgres_instance_id" {
  description = "RDS / Aurora PostgreSQL instance captured by the stream (null: not on RDS); its slot lag is watched."
  type        = string
  default     = null
}

variable "kafka_cluster_name" {
  description = "MSK cluster to watch (null: none)."
  type        = string
  default     = null
}

variable "kafka_broker_count" {
  description = "MSK brokers (their IDs are 1 to this), whose disks the kafka-disk alarm watches."
  type        = number
  default     = 3
}

variable "max_slot_lag_mb" {
  description = "Alarm when the replication slot holds more WAL than this, in MB."
  type        = number
  default     = 1024
}

variable "alarm_emails" {
  description = "Addresses subscribed to the alarm topic."
  type        = list(string)
  default     = []
}

variable "kms_key_arn" {
  description = "KMS key of the alarm topic."
  type        = string
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}

variable "connector" {
  description = "postgresql or sqlserver: which source alarms apply."
  type        = string
  default     = "postgresql"
}

variable "topic_prefix" {
  description = "The connector's topic.prefix: the Connector dimension of its metrics."
  type        = string
}

variable "database_names" {
  description = "The captured databases: the Database dimension of their metrics."
  type        = list(string)
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the jobs send Debezium's metrics to (cdckit.metrics.cloudwatch.namespace)."
  type        = string
  default     = "cdckit"
}

variable "max_lag_seconds" {
  description = "Alarm when the stream is further behind its source than this (MilliSecondsBehindSource), in seconds."
  type        = number
  default     = 300
}

variable "max_capture_latency_seconds" {
  description = "SQL Server: alarm when the capture job's latency is over this, in seconds."
  type        = number
  default     = 300
}

variable "min_cleanup_margin_hours" {
  description = "SQL Server: alarm when fewer hours of changes than this lie between the cleanup low-water mark and cdckit's position."
  type        = number
  default     = 24
}
