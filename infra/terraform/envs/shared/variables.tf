# Shared by envs/dev and envs/prod (linked into each): what a user sets in terraform.tfvars.
variable "region" {
  description = "AWS region of the environment."
  type        = string
}

variable "tags" {
  description = "Extra tags (cost centre, owner...) added to project, environment and managed-by."
  type        = map(string)
  default     = {}
}

variable "bucket_name" {
  description = "Name of the kit's S3 bucket (globally unique)."
  type        = string
}

variable "vpc_id" {
  description = "Your own VPC (null creates one)."
  type        = string
  default     = null
}

variable "vpc_cidr_block" {
  description = "CIDR block of your own VPC (with vpc_id)."
  type        = string
  default     = null
}

variable "private_subnet_ids" {
  description = "Private subnets of your own VPC (with vpc_id)."
  type        = list(string)
  default     = []
}

variable "job_image_uri" {
  description = "The cdckit job image in ECR (make deploy pushes it and passes its tag)."
  type        = string
}

variable "create_sqlserver" {
  description = "Create an RDS for SQL Server instance as the source (else database_hostname)."
  type        = bool
  default     = false
}

variable "connector" {
  description = "postgresql or sqlserver."
  type        = string
  default     = "postgresql"
}

variable "database_hostname" {
  description = "The captured database's host (when create_sqlserver is false)."
  type        = string
  default     = null
}

variable "database_port" {
  description = "The captured database's port (when create_sqlserver is false)."
  type        = number
  default     = 5432
}

variable "database_cidr_blocks" {
  description = "Where the captured database is when it is outside the VPC (a peered VPC, on-premises over VPN or Direct Connect): the jobs may reach database_port there. The route (peering, transit gateway) and the database's own inbound rule are yours. Empty: the database is in the VPC (create_sqlserver, or your own instance there)."
  type        = list(string)
  default     = []
}

variable "database_names" {
  description = "Databases to capture."
  type        = list(string)
}

variable "postgres_instance_id" {
  description = "RDS identifier of a PostgreSQL source, for the slot lag alarm (null: none)."
  type        = string
  default     = null
}

variable "table_include_list" {
  description = "Tables to capture (schema.table regular expressions)."
  type        = list(string)
}

variable "topic_prefix" {
  description = "topic.prefix of the events (the jobs may write only these topics)."
  type        = string
}

variable "alarm_emails" {
  description = "Addresses for the alarms."
  type        = list(string)
  default     = []
}

variable "runtime" {
  description = "Where the jobs run: emr (EMR Serverless) or eks (the Spark operator on an existing EKS cluster)."
  type        = string
  default     = "emr"
}

variable "eks_cluster_name" {
  description = "The EKS cluster the jobs run on (runtime = eks)."
  type        = string
  default     = null
}

variable "create_eks_oidc_provider" {
  description = "Create the EKS cluster's IAM OIDC provider for IRSA (false: one exists already)."
  type        = bool
  default     = false
}
