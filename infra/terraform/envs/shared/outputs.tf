# Shared by envs/dev and envs/prod (linked into each): make deploy reads these.
output "bucket" {
  description = "The kit's bucket."
  value       = module.cdckit.bucket
}

output "artifacts_uri" {
  description = "Where make deploy uploads the wheel and the job files."
  value       = module.cdckit.artifacts_uri
}

output "application_id" {
  description = "EMR Serverless application of the jobs."
  value       = module.cdckit.application_id
}

output "jobs_role_arn" {
  description = "Execution role of the jobs."
  value       = module.cdckit.jobs_role_arn
}

output "log_group_name" {
  description = "CloudWatch log group of the jobs."
  value       = module.cdckit.log_group_name
}

output "connector" {
  description = "The jobs' connector configuration (make deploy writes it to the artefacts)."
  value       = module.cdckit.connector
}

output "database_secret_arn" {
  description = "Put the database user and password here: aws secretsmanager put-secret-value --secret-id <arn>."
  value       = module.cdckit.database_secret_arn
}

output "job_image_repository_url" {
  description = "The job image's ECR repository: make deploy JOB_IMAGE=<this>:<tag> builds and pushes there."
  value       = module.cdckit.job_image_repository_url
}

output "namespace" {
  description = "Where make deploy RUNTIME=eks applies the SparkApplications (null on EMR Serverless)."
  value       = module.cdckit.namespace
}

output "service_account" {
  description = "The service account of the jobs' pods on EKS (null on EMR Serverless)."
  value       = module.cdckit.service_account
}
