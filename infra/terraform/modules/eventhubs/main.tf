# An Azure Event Hubs namespace with its Kafka endpoint (Standard tier or above), one event hub per topic, and a
# send-only authorization rule for cdckit (its connection string goes to cdckit.eventhubs.connection.string).
resource "azurerm_eventhub_namespace" "this" {
  name                          = var.namespace_name
  location                      = var.location
  resource_group_name           = var.resource_group_name
  sku                           = var.sku
  capacity                      = var.capacity
  minimum_tls_version           = "1.2"
  public_network_access_enabled = var.public_network_access
  local_authentication_enabled  = true
  tags                          = var.tags
}

resource "azurerm_eventhub" "topics" {
  for_each          = toset(var.topics)
  name              = each.value
  namespace_id      = azurerm_eventhub_namespace.this.id
  partition_count   = var.partition_count
  message_retention = var.retention_days
}

resource "azurerm_eventhub_namespace_authorization_rule" "cdckit" {
  name                = "cdckit-send"
  namespace_name      = azurerm_eventhub_namespace.this.name
  resource_group_name = var.resource_group_name
  listen              = false
  send                = true
  manage              = false
}
