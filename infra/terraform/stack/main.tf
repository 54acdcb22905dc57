# The whole kit for one environment: a VPC (or yours), the kit's bucket, secrets, MSK, EMR Serverless, the jobs'
# role, alarms, SQL Server on RDS when create_sqlserver is set, and the jobs' configuration. envs/dev and
# envs/prod call it with their sizes.
locals {
  name = "cdckit-${var.environment}"
  tags = var.tags
}

module "storage" {
  source        = "../modules/storage"
  name          = local.name
  bucket_name   = var.bucket_name
  force_destroy = !var.production
  tags          = local.tags
}

module "network" {
  source               = "../modules/network"
  name                 = local.name
  vpc_id               = var.vpc_id
  vpc_cidr_block       = var.vpc_cidr_block
  private_subnet_ids   = var.private_subnet_ids
  zone_count           = var.zone_count
  flow_log_bucket_arn  = module.storage.log_bucket_arn
  database_cidr_blocks = var.database_cidr_blocks
  database_port        = var.create_sqlserver ? 1433 : var.database_port
  tags                 = local.tags
}

module "secrets" {
  source                  = "../modules/secrets"
  name                    = local.name
  kms_key_arn             = module.storage.kms_key_arn
  recovery_window_in_days = var.production ? 30 : 0
  tags                    = local.tags
}

module "kafka" {
  source                   = "../modules/kafka"
  name                     = local.name
  vpc_id                   = module.network.vpc_id
  vpc_cidr_block           = module.network.cidr_block
  subnet_ids               = module.network.private_subnet_ids
  client_security_group_id = module.network.jobs_security_group_id
  kms_key_arn              = module.storage.kms_key_arn
  broker_count             = var.kafka_broker_count
  instance_type            = var.kafka_instance_type
  tags                     = local.tags
}

module "registry" {
  source       = "../modules/registry"
  name         = local.name
  kms_key_arn  = module.storage.kms_key_arn
  force_delete = !var.production
  tags         = local.tags
}

module "spark" {
  source            = "../modules/spark"
  name              = local.name
  image_uri         = var.job_image_uri
  subnet_ids        = module.network.private_subnet_ids
  security_group_id = module.network.jobs_security_group_id
  kms_key_arn       = module.storage.kms_key_arn
  max_cpu           = var.spark_max_cpu
  max_memory        = var.spark_max_memory
  tags              = local.tags
}

# The Kubernetes path (runtime = "eks"): the jobs' pods assume the jobs' role through the cluster's OIDC provider
# (IRSA), created here or found where eksctl or another stack made it. The environment reads the cluster (for its
# providers) and passes its issuer.
locals {
  eks         = var.runtime == "eks"
  oidc_issuer = local.eks ? var.eks_oidc_issuer : null
  oidc_arn = local.eks ? (var.create_eks_oidc_provider ? aws_iam_openid_connect_provider.eks[0].arn :
  data.aws_iam_openid_connect_provider.eks[0].arn) : null
}

resource "aws_iam_openid_connect_provider" "eks" {
  count          = local.eks && var.create_eks_oidc_provider ? 1 : 0
  url            = local.oidc_issuer
  client_id_list = ["sts.amazonaws.com"]
  tags           = local.tags
}

data "aws_iam_openid_connect_provider" "eks" {
  count = local.eks && !var.create_eks_oidc_provider ? 1 : 0
  url   = local.oidc_issuer
}

module "iam" {
  source                = "../modules/iam"
  name                  = local.name
  bucket_arn            = module.storage.bucket_arn
  kms_key_arn           = module.storage.kms_key_arn
  database_secret_arn   = module.secrets.database_secret_arn
  kafka_cluster_arn     = module.kafka.cluster_arn
  topic_prefix          = var.topic_prefix
  log_group_arn         = module.spark.log_group_arn
  metrics_namespace     = var.metrics_namespace
  eks_oidc_provider_arn = local.oidc_arn
  eks_oidc_issuer       = local.eks ? trimprefix(local.oidc_issuer, "https://") : null
  eks_namespace         = var.eks_namespace
  eks_service_account   = var.eks_service_account
  tags                  = local.tags
}

module "spark_eks" {
  count           = local.eks ? 1 : 0
  source          = "../modules/spark-eks"
  namespace       = var.eks_namespace
  service_account = var.eks_service_account
  jobs_role_arn   = module.iam.jobs_role_arn
  labels          = local.tags
}

module "sqlserver" {
  count                    = var.create_sqlserver ? 1 : 0
  source                   = "../modules/sqlserver"
  name                     = local.name
  vpc_id                   = module.network.vpc_id
  subnet_ids               = module.network.private_subnet_ids
  client_security_group_id = module.network.jobs_security_group_id
  kms_key_arn              = module.storage.kms_key_arn
  multi_az                 = var.production
  deletion_protection      = var.production
  tags                     = local.tags
}

module "monitoring" {
  source               = "../modules/monitoring"
  name                 = local.name
  application_id       = module.spark.application_id
  kafka_cluster_name   = module.kafka.cluster_name
  kafka_broker_count   = var.kafka_broker_count
  postgres_instance_id = var.postgres_instance_id
  alarm_emails         = var.alarm_emails
  kms_key_arn          = module.storage.kms_key_arn
  connector            = var.connector
  topic_prefix         = var.topic_prefix
  database_names       = var.database_names
  metrics_namespace    = var.metrics_namespace
  tags                 = local.tags
}

module "job_config" {
  source                  = "../modules/job-config"
  name                    = local.name
  connector               = var.connector
  topic_prefix            = var.topic_prefix
  database_hostname       = var.create_sqlserver ? module.sqlserver[0].address : var.database_hostname
  database_port           = var.create_sqlserver ? module.sqlserver[0].port : var.database_port
  database_names          = var.database_names
  database_secret_arn     = module.secrets.database_secret_arn
  table_include_list      = var.table_include_list
  kafka_bootstrap_servers = module.kafka.bootstrap_servers
  kafka_broker_count      = var.kafka_broker_count
  checkpoint_uri          = module.storage.checkpoint_uri
  delta_uri               = module.storage.delta_uri
  metrics_namespace       = var.metrics_namespace
}
