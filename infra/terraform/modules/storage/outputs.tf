output "bucket" {
  description = "The kit's bucket name."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "The kit's bucket ARN."
  value       = aws_s3_bucket.this.arn
}

output "kms_key_arn" {
  description = "KMS key encrypting the bucket, the secrets and the logs."
  value       = aws_kms_key.this.arn
}

output "artifacts_uri" {
  description = "Where make deploy uploads the wheel and the job files."
  value       = "s3://${aws_s3_bucket.this.id}/artifacts"
}

output "checkpoint_uri" {
  description = "cdckit.checkpoint.location of the stream job."
  value       = "s3://${aws_s3_bucket.this.id}/checkpoints"
}

output "delta_uri" {
  description = "cdckit.delta.path of the Delta sink."
  value       = "s3://${aws_s3_bucket.this.id}/delta"
}

output "log_bucket_arn" {
  description = "The log bucket (S3 access logs, VPC flow logs), encrypted with SSE-S3."
  value       = aws_s3_bucket.logs.arn
}
