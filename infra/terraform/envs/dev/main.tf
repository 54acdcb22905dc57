# dev: two zones and brokers, small instances; SQL Server (if created) single-AZ, everything destroyable.
provider "aws" {
  region = var.region
  default_tags {
    tags = local.tags
  }
}

locals {
  tags = merge(var.tags, {
    project     = "cdckit"
    environment = "dev"
    managed-by  = "terraform"
  })
}

module "cdckit" {
  source                   = "../../stack"
  environment              = "dev"
  production               = false
  tags                     = local.tags
  zone_count               = 2
  kafka_broker_count       = 2
  kafka_instance_type      = "kafka.t3.small"
  spark_max_cpu            = "8 vCPU"
  spark_max_memory         = "32 GB"
  bucket_name              = var.bucket_name
  vpc_id                   = var.vpc_id
  vpc_cidr_block           = var.vpc_cidr_block
  private_subnet_ids       = var.private_subnet_ids
  job_image_uri            = var.job_image_uri
  create_sqlserver         = var.create_sqlserver
  connector                = var.connector
  database_hostname        = var.database_hostname
  database_port            = var.database_port
  database_cidr_blocks     = var.database_cidr_blocks
  database_names           = var.database_names
  postgres_instance_id     = var.postgres_instance_id
  table_include_list       = var.table_include_list
  topic_prefix             = var.topic_prefix
  alarm_emails             = var.alarm_emails
  runtime                  = var.runtime
  eks_oidc_issuer          = try(data.aws_eks_cluster.jobs[0].identity[0].oidc[0].issuer, null)
  create_eks_oidc_provider = var.create_eks_oidc_provider
}
