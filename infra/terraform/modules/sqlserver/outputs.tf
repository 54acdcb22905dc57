output "address" {
  description = "database.hostname of the SQL Server connector."
  value       = aws_db_instance.this.address
}

output "port" {
  description = "database.port."
  value       = aws_db_instance.this.port
}

output "master_user_secret_arn" {
  description = "Secrets Manager secret RDS keeps the master password in (for the DBA scripts, not the jobs)."
  value       = aws_db_instance.this.master_user_secret[0].secret_arn
}
