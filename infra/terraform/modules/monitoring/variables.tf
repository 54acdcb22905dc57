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
