variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "vpc_id" {
  description = "An existing VPC to use (bring your own); null creates one."
  type        = string
  default     = null
}

variable "vpc_cidr_block" {
  description = "CIDR block of the existing VPC (with vpc_id)."
  type        = string
  default     = null
}

variable "private_subnet_ids" {
  description = "Private subnets of the existing VPC (with vpc_id)."
  type        = list(string)
  default     = []
}

variable "cidr_block" {
  description = "CIDR block of the VPC created when vpc_id is null."
  type        = string
  default     = "10.40.0.0/16"
}

variable "zone_count" {
  description = "Availability zones to spread subnets over (MSK needs at least 2)."
  type        = number
  default     = 3
}

variable "flow_log_bucket_arn" {
  description = "S3 bucket ARN receiving the VPC flow logs."
  type        = string
  default     = null
}

variable "database_cidr_blocks" {
  description = "CIDR blocks outside the VPC where the captured database is: the jobs may reach database_port there."
  type        = list(string)
  default     = []
}

variable "database_port" {
  description = "The captured database's port (with database_cidr_blocks)."
  type        = number
  default     = 5432
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
