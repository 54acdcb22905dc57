# EMR Serverless application for the cdckit jobs, in the VPC's private subnets, with the cdckit job image.
resource "aws_cloudwatch_log_group" "jobs" {
  name              = "/cdckit/${var.name}/jobs"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = var.tags
}

resource "aws_emrserverless_application" "this" {
  name          = "${var.name}-cdckit"
  release_label = var.release_label
  type          = "spark"

  architecture = var.architecture

  image_configuration {
    image_uri = var.image_uri
  }

  network_configuration {
    subnet_ids         = var.subnet_ids
    security_group_ids = [var.security_group_id]
  }

  maximum_capacity {
    cpu    = var.max_cpu
    memory = var.max_memory
  }

  auto_start_configuration {
    enabled = true
  }

  auto_stop_configuration {
    enabled              = true
    idle_timeout_minutes = var.idle_timeout_minutes
  }

  tags = var.tags
}
