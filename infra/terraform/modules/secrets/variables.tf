variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the secret."
  type        = string
}

variable "recovery_window_in_days" {
  description = "Days a deleted secret can be restored (0 deletes at once; dev only)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
