output "jobs_role_arn" {
  description = "Execution role of the snapshot, stream and schema-evolution jobs."
  value       = aws_iam_role.jobs.arn
}
