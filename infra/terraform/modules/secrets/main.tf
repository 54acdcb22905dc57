# The source database's credentials for the jobs, in Secrets Manager (never in job arguments or files).
# The secret's value is set outside Terraform (console, CLI or the database module's managed password), so it
# never lands in the state; jobs read it with cdckit's ${secret:...} reference.
resource "aws_secretsmanager_secret" "database" {
  # checkov:skip=CKV2_AWS_57:the database login's rotation is the DBA's (RDS managed rotation or their Lambda)
  name                    = "${var.name}/source-database"
  description             = "cdckit: user and password of the captured database"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.recovery_window_in_days
  tags                    = var.tags
}
