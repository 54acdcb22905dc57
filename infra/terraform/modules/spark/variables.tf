variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "release_label" {
  description = "EMR release of the application: its Spark must be the job image's (src/cdckit/versions.py)."
  type        = string
  default     = "emr-spark-8.0.0"
}

variable "architecture" {
  description = "X86_64 or ARM64 (the job image must be built for it)."
  type        = string
  default     = "X86_64"
}

variable "image_uri" {
  description = "The cdckit job image (containers/job) in ECR, pinned by tag or digest."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the jobs."
  type        = list(string)
}

variable "security_group_id" {
  description = "Security group of the jobs."
  type        = string
}

variable "max_cpu" {
  description = "Largest total vCPU the application may use, e.g. \"16 vCPU\"."
  type        = string
  default     = "16 vCPU"
}

variable "max_memory" {
  description = "Largest total memory the application may use, e.g. \"64 GB\"."
  type        = string
  default     = "64 GB"
}

variable "idle_timeout_minutes" {
  description = "Minutes without a job before the application stops."
  type        = number
  default     = 15
}

variable "kms_key_arn" {
  description = "KMS key of the jobs' log group."
  type        = string
}

variable "log_retention_days" {
  description = "Days job logs are kept."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
