output "connector" {
  description = "The jobs' connector configuration (properties as strings; secrets only as references)."
  value       = local.connector
}
