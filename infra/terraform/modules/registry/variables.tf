variable "name" {
  description = "Prefix of resource names."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key the repository's images are encrypted with."
  type        = string
}

variable "images_kept" {
  description = "How many images the repository keeps (older ones expire): the rollback depth."
  type        = number
  default     = 20
}

variable "force_delete" {
  description = "Whether destroy deletes the repository with its images (dev), or refuses while it holds any (prod)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags of every resource."
  type        = map(string)
  default     = {}
}
