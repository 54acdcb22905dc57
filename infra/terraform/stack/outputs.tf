output "bucket" {
  description = "The kit's bucket."
  value       = module.storage.bucket
}

output "artifacts_uri" {
  description = "Where make deploy uploads the wheel and the job files."
  value       = module.storage.artifacts_uri
}

output "application_id" {
  description = "EMR Serverless application of the jobs."
  value       = module.spark.application_id
}

output "jobs_role_arn" {
  description = "Execution role of the jobs."
  value       = module.iam.jobs_role_arn
}

output "log_group_name" {
  description = "CloudWatch log group of the jobs."
  value       = module.spark.log_group_name
}

output "connector" {
  description = "The jobs' connector configuration (make deploy writes it to the artefacts)."
  value       = module.job_config.connector
}

output "database_secret_arn" {
  description = "Put the database user and password here: aws secretsmanager put-secret-value --secret-id <arn>."
  value       = module.secrets.database_secret_arn
}

output "job_image_repository_url" {
  description = "The job image's ECR repository: make deploy JOB_IMAGE=<this>:<tag> pushes there."
  value       = module.registry.repository_url
}

output "namespace" {
  description = "Where make deploy RUNTIME=eks applies the SparkApplications (null on EMR Serverless)."
  value       = try(module.spark_eks[0].namespace, null)
}

output "service_account" {
  description = "The service account of the jobs' pods on EKS (null on EMR Serverless)."
  value       = try(module.spark_eks[0].service_account, null)
}
