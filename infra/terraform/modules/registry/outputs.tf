output "repository_url" {
  description = "Where make deploy pushes the job image: <repository_url>:<tag> is JOB_IMAGE."
  value       = aws_ecr_repository.job.repository_url
}

output "repository_arn" {
  description = "The repository's ARN."
  value       = aws_ecr_repository.job.arn
}
