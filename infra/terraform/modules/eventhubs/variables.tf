variable "namespace_name" {
  description = "Event Hubs namespace (<name>.servicebus.windows.net)."
  type        = string
}

variable "location" {
  description = "Azure region of the namespace."
  type        = string
}

variable "resource_group_name" {
  description = "Resource group of the namespace."
  type        = string
}

variable "sku" {
  description = "Standard or Premium (Basic has no Kafka endpoint)."
  type        = string
  default     = "Standard"
  validation {
    condition     = contains(["Standard", "Premium"], var.sku)
    error_message = "The Kafka endpoint needs the Standard or Premium tier."
  }
}

variable "capacity" {
  description = "Throughput (Standard) or processing (Premium) units."
  type        = number
  default     = 1
}

variable "public_network_access" {
  description = "Reachable from public networks (false: private endpoints only)."
  type        = bool
  default     = false
}

variable "topics" {
  description = "Event hubs to create: cdckit's topic names (<topic.prefix>.<schema>.<table>, ...)."
  type        = list(string)
}

variable "partition_count" {
  description = "Partitions per event hub."
  type        = number
  default     = 4
}

variable "retention_days" {
  description = "Days events are kept."
  type        = number
  default     = 7
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
}
