variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the database."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the database (two zones at least)."
  type        = list(string)
}

variable "client_security_group_id" {
  description = "Security group of the jobs, the only clients let in."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key for storage, the managed password and Performance Insights."
  type        = string
}

variable "partition" {
  description = "AWS partition (aws, aws-cn, aws-us-gov)."
  type        = string
  default     = "aws"
}

variable "engine" {
  description = "sqlserver-se or sqlserver-ee (CDC needs the SQL Server Agent, which Express and Web lack)."
  type        = string
  default     = "sqlserver-se"
  validation {
    condition     = contains(["sqlserver-se", "sqlserver-ee"], var.engine)
    error_message = "CDC needs the SQL Server Agent: use sqlserver-se or sqlserver-ee."
  }
}

variable "engine_version" {
  description = "SQL Server engine version (2022: 16.00)."
  type        = string
  default     = "16.00"
}

variable "parameter_group_family" {
  description = "Parameter group family matching engine and version."
  type        = string
  default     = "sqlserver-se-16.0"
}

variable "instance_class" {
  description = "DB instance class."
  type        = string
  default     = "db.m6i.xlarge"
}

variable "allocated_storage_gb" {
  description = "Initial storage in GiB (grows up to four times)."
  type        = number
  default     = 100
}

variable "master_username" {
  description = "Master user name (its password is generated and kept by RDS in Secrets Manager)."
  type        = string
  default     = "cdckit_admin"
}

variable "multi_az" {
  description = "Standby in a second zone (production)."
  type        = bool
  default     = true
}

variable "backup_retention_days" {
  description = "Days of automated backups (at least 1: CDC on RDS needs them)."
  type        = number
  default     = 7
  validation {
    condition     = var.backup_retention_days >= 1
    error_message = "CDC on RDS for SQL Server needs automated backups (backup_retention_days >= 1)."
  }
}

variable "deletion_protection" {
  description = "Refuse deletion and keep a final snapshot (production)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
