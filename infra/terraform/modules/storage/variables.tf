variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "bucket_name" {
  description = "Name of the kit's S3 bucket (globally unique)."
  type        = string
}

variable "partition" {
  description = "AWS partition (aws, aws-cn, aws-us-gov)."
  type        = string
  default     = "aws"
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a bucket that still holds objects (dev only)."
  type        = bool
  default     = false
}

variable "noncurrent_version_days" {
  description = "Days a replaced object version is kept."
  type        = number
  default     = 30
}

variable "log_days" {
  description = "How long the log bucket keeps S3 access logs and VPC flow logs."
  type        = number
  default     = 90
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
