variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the brokers."
  type        = string
}

variable "vpc_cidr_block" {
  description = "CIDR block of the VPC (broker egress stays inside it)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the brokers, one per zone (2 or 3)."
  type        = list(string)
}

variable "client_security_group_id" {
  description = "Security group of the jobs, the only clients let in."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key for data at rest and broker logs."
  type        = string
}

variable "kafka_version" {
  description = "Apache Kafka version of the cluster."
  type        = string
  default     = "3.6.0"
}

variable "broker_count" {
  description = "Brokers (a multiple of the subnet count)."
  type        = number
  default     = 3
}

variable "instance_type" {
  description = "Broker instance type."
  type        = string
  default     = "kafka.m7g.large"
}

variable "volume_size_gb" {
  description = "EBS storage per broker, in GiB."
  type        = number
  default     = 100
}

variable "log_retention_days" {
  description = "Days broker logs are kept."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
