variable "name" {
  description = "Connector name (also the checkpoint folder)."
  type        = string
}

variable "connector" {
  description = "postgresql or sqlserver."
  type        = string
  validation {
    condition     = contains(["postgresql", "sqlserver"], var.connector)
    error_message = "connector is postgresql or sqlserver."
  }
}

variable "topic_prefix" {
  description = "topic.prefix of the events."
  type        = string
}

variable "database_hostname" {
  description = "The captured database's host."
  type        = string
}

variable "database_port" {
  description = "The captured database's port."
  type        = number
}

variable "database_names" {
  description = "Databases to capture (PostgreSQL: exactly one)."
  type        = list(string)
}

variable "database_secret_arn" {
  description = "Secret with the database user and password (read by the job at start, never written out)."
  type        = string
}

variable "slot_name" {
  description = "PostgreSQL replication slot."
  type        = string
  default     = "cdckit"
}

variable "table_include_list" {
  description = "Tables to capture (regular expressions, schema.table)."
  type        = list(string)
}

variable "kafka_bootstrap_servers" {
  description = "MSK bootstrap servers for IAM over TLS (null: no Kafka sink)."
  type        = string
  default     = null
}

variable "kafka_broker_count" {
  description = "Brokers of the Kafka cluster: topics get min(3, this) replicas."
  type        = number
  default     = 3
}

variable "checkpoint_uri" {
  description = "S3 prefix of the checkpoints (storage module)."
  type        = string
}

variable "delta_uri" {
  description = "S3 prefix of the Delta tables (storage module)."
  type        = string
}

variable "extra_properties" {
  description = "Further connector properties (handling modes, filters...), merged last."
  type        = map(string)
  default     = {}
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the jobs send Debezium's metrics to."
  type        = string
  default     = "cdckit"
}
