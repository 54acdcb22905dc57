output "database_secret_arn" {
  description = "Secret holding {\"username\": ..., \"password\": ...} of the captured database."
  value       = aws_secretsmanager_secret.database.arn
}
