# The ECR repository of the cdckit job image. make deploy applies it alone first (terraform apply
# -target=module.cdckit.module.registry), pushes the image, and only then plans the application that runs it.
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  applications = join(":", ["arn:${data.aws_partition.current.partition}:emr-serverless", data.aws_region.current.name,
  data.aws_caller_identity.current.account_id, "/applications/*"])
}

resource "aws_ecr_repository" "job" {
  name                 = "${var.name}/job"
  image_tag_mutability = "IMMUTABLE" # a tag names one image for good: a deploy pins what it ran
  force_delete         = var.force_delete

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = var.kms_key_arn
  }

  tags = var.tags
}

# EMR Serverless pulls a custom image as its service principal: the repository must let it, for this account's
# applications only (AWS: "Using custom images with EMR Serverless", the repository policy).
data "aws_iam_policy_document" "emr_serverless_pull" {
  statement {
    sid     = "EmrServerlessCustomImageSupport"
    effect  = "Allow"
    actions = ["ecr:BatchGetImage", "ecr:DescribeImages", "ecr:GetDownloadUrlForLayer"]
    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [local.applications]
    }
  }
}

resource "aws_ecr_repository_policy" "job" {
  repository = aws_ecr_repository.job.name
  policy     = data.aws_iam_policy_document.emr_serverless_pull.json
}

# Every deploy pushes a new tag; keep the last ones for a rollback, expire the rest.
resource "aws_ecr_lifecycle_policy" "job" {
  repository = aws_ecr_repository.job.name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "keep the last ${var.images_kept} images"
      selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = var.images_kept }
      action       = { type = "expire" }
    }]
  })
}
