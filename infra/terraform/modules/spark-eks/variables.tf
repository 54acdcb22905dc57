variable "namespace" {
  description = "Namespace of the jobs' SparkApplications."
  type        = string
  default     = "cdckit"
}

variable "service_account" {
  description = "Service account of the jobs' driver and executor pods."
  type        = string
  default     = "cdckit-jobs"
}

variable "jobs_role_arn" {
  description = "IAM role of the jobs (iam module, with the cluster's OIDC provider)."
  type        = string
}

variable "operator_namespace" {
  description = "Namespace of the Spark operator."
  type        = string
  default     = "spark-operator"
}

variable "chart_repository" {
  description = "Helm repository of the Kubeflow Spark operator chart."
  type        = string
  default     = "https://kubeflow.github.io/spark-operator"
}

variable "chart_version" {
  description = "Spark operator chart version (pinned). The operator submits with its own spark-submit: Spark 4.0 from chart 2.3 on (the job image runs 4.0.2), Spark 3.5 before."
  type        = string
  default     = "2.5.2"
}

variable "labels" {
  description = "Labels for the namespace and service account (the tags of the other modules)."
  type        = map(string)
}
