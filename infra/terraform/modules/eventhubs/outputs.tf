output "namespace" {
  description = "cdckit.eventhubs.namespace."
  value       = azurerm_eventhub_namespace.this.name
}

output "send_connection_string" {
  description = "cdckit.eventhubs.connection.string (send only); keep it in a secret store."
  value       = azurerm_eventhub_namespace_authorization_rule.cdckit.primary_connection_string
  sensitive   = true
}
