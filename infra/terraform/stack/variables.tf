variable "environment" {
  description = "Environment name (dev, prod): part of every resource name."
  type        = string
}

variable "production" {
  description = "Production settings: Multi-AZ and deletion protection for SQL Server, secrets and bucket kept on destroy."
  type        = bool
}

variable "tags" {
  description = "Tags for every resource (the environment adds project, environment and managed-by)."
  type        = map(string)
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

variable "zone_count" {
  description = "Availability zones of a created VPC."
  type        = number
}

variable "kafka_broker_count" {
  description = "MSK brokers (a multiple of zone_count)."
  type        = number
}

variable "kafka_instance_type" {
  description = "MSK broker instance type."
  type        = string
}

variable "job_image_uri" {
  description = "The cdckit job image in ECR (make deploy pushes it and passes its tag)."
  type        = string
}

variable "spark_max_cpu" {
  description = "EMR Serverless capacity cap (vCPU)."
  type        = string
}

variable "spark_max_memory" {
  description = "EMR Serverless capacity cap (memory)."
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

variable "metrics_namespace" {
  description = "CloudWatch namespace of Debezium's metrics the jobs send, and of the alarms and dashboard on them."
  type        = string
  default     = "cdckit"
}

variable "runtime" {
  description = "Where the jobs run: emr (EMR Serverless) or eks (the Spark operator on an existing EKS cluster, besides)."
  type        = string
  default     = "emr"
  validation {
    condition     = contains(["emr", "eks"], var.runtime)
    error_message = "runtime is emr or eks."
  }
}

variable "eks_oidc_issuer" {
  description = "The OIDC issuer URL of the EKS cluster the jobs run on (runtime = eks)."
  type        = string
  default     = null
}

variable "create_eks_oidc_provider" {
  description = "Create the cluster's IAM OIDC provider (false: one exists already, as eksctl makes it)."
  type        = bool
  default     = false
}

variable "eks_namespace" {
  description = "Namespace of the jobs' SparkApplications on EKS."
  type        = string
  default     = "cdckit"
}

variable "eks_service_account" {
  description = "Service account the jobs' driver and executor pods run as on EKS (IRSA: the jobs' role)."
  type        = string
  default     = "cdckit-jobs"
}
