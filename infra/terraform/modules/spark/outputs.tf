output "application_id" {
  description = "EMR Serverless application id (make deploy starts job runs on it)."
  value       = aws_emrserverless_application.this.id
}

output "log_group_name" {
  description = "CloudWatch log group of the jobs."
  value       = aws_cloudwatch_log_group.jobs.name
}

output "log_group_arn" {
  description = "CloudWatch log group ARN of the jobs."
  value       = aws_cloudwatch_log_group.jobs.arn
}
