variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "bucket_arn" {
  description = "The kit's bucket (artefacts read; checkpoints, Delta tables and job logs written)."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key of the bucket and the secret."
  type        = string
}

variable "database_secret_arn" {
  description = "The only secret the jobs may read."
  type        = string
}

variable "kafka_cluster_arn" {
  description = "MSK cluster the stream writes to (null when the sink is not MSK)."
  type        = string
  default     = null
}

variable "topic_prefix" {
  description = "topic.prefix of the connector: the jobs may write only topics that start with it."
  type        = string
}

variable "log_group_arn" {
  description = "CloudWatch log group of the jobs."
  type        = string
}

variable "eks_oidc_provider_arn" {
  description = "OIDC provider of the EKS cluster, to let the Spark operator's service account assume the role (null: EMR Serverless only)."
  type        = string
  default     = null
}

variable "eks_oidc_issuer" {
  description = "Issuer host/path of the EKS cluster's OIDC provider (with eks_oidc_provider_arn)."
  type        = string
  default     = null
}

variable "eks_namespace" {
  description = "Namespace of the jobs' service account on EKS."
  type        = string
  default     = "cdckit"
}

variable "eks_service_account" {
  description = "Service account the jobs' pods run as on EKS."
  type        = string
  default     = "cdckit-jobs"
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the jobs send Debezium's metrics to (cdckit.metrics.cloudwatch.namespace)."
  type        = string
  default     = "cdckit"
}
