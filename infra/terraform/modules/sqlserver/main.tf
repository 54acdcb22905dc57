# Amazon RDS for SQL Server set up for CDC: an edition with the SQL Server Agent (Standard or Enterprise), automated
# backups (RDS runs the Agent and keeps the log only with them), encrypted, private, Multi-AZ in production, the
# master password managed by RDS in Secrets Manager. Enable CDC afterwards with sql/sqlserver/ (on RDS:
# EXEC msdb.dbo.rds_cdc_enable_db '<db>'; the table scripts are the same).
resource "aws_db_subnet_group" "this" {
  name       = "${var.name}-sqlserver"
  subnet_ids = var.subnet_ids
  tags       = var.tags
}

resource "aws_security_group" "sqlserver" {
  name        = "${var.name}-sqlserver"
  description = "SQL Server: TDS from the cdckit jobs only"
  vpc_id      = var.vpc_id
  ingress {
    description     = "TDS from the jobs"
    from_port       = 1433
    to_port         = 1433
    protocol        = "tcp"
    security_groups = [var.client_security_group_id]
  }
  tags = var.tags
}

resource "aws_db_parameter_group" "this" {
  name   = "${var.name}-sqlserver"
  family = var.parameter_group_family
  parameter {
    name         = "rds.force_ssl"
    value        = "1"
    apply_method = "pending-reboot"
  }
  tags = var.tags
}

resource "aws_iam_role" "monitoring" {
  name = "${var.name}-rds-monitoring"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "monitoring.rds.amazonaws.com" }
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy_attachment" "monitoring" {
  role       = aws_iam_role.monitoring.name
  policy_arn = "arn:${var.partition}:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}

resource "aws_db_instance" "this" {
  # checkov:skip=CKV_AWS_157:Multi-AZ is var.multi_az, on in envs/prod; dev runs single-AZ to halve its cost
  # checkov:skip=CKV_AWS_293:deletion protection is var.deletion_protection, on by default and in envs/prod; dev can be destroyed
  identifier                          = "${var.name}-sqlserver"
  engine                              = var.engine
  engine_version                      = var.engine_version
  license_model                       = "license-included"
  instance_class                      = var.instance_class
  allocated_storage                   = var.allocated_storage_gb
  max_allocated_storage               = var.allocated_storage_gb * 4
  storage_type                        = "gp3"
  storage_encrypted                   = true
  kms_key_id                          = var.kms_key_arn
  username                            = var.master_username
  manage_master_user_password         = true
  master_user_secret_kms_key_id       = var.kms_key_arn
  db_subnet_group_name                = aws_db_subnet_group.this.name
  vpc_security_group_ids              = [aws_security_group.sqlserver.id]
  parameter_group_name                = aws_db_parameter_group.this.name
  publicly_accessible                 = false
  multi_az                            = var.multi_az
  backup_retention_period             = var.backup_retention_days
  copy_tags_to_snapshot               = true
  deletion_protection                 = var.deletion_protection
  skip_final_snapshot                 = !var.deletion_protection
  final_snapshot_identifier           = var.deletion_protection ? "${var.name}-sqlserver-final" : null
  auto_minor_version_upgrade          = true
  performance_insights_enabled        = true
  performance_insights_kms_key_id     = var.kms_key_arn
  monitoring_interval                 = 60
  monitoring_role_arn                 = aws_iam_role.monitoring.arn
  enabled_cloudwatch_logs_exports     = ["agent", "error"]
  iam_database_authentication_enabled = false # checkov:skip=CKV_AWS_161:RDS for SQL Server has no IAM database authentication
  tags                                = var.tags
}
