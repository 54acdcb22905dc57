# The jobs' execution role: least privilege for EMR Serverless (or, through IRSA, the Spark operator's pods).
data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["emr-serverless.amazonaws.com"]
    }
    # Only the account's own EMR Serverless applications take the role (AWS's confused-deputy guard, as the EMR
    # Serverless user guide's job runtime role shows it)
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:emr-serverless:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:/applications/*"]
    }
  }
  dynamic "statement" {
    for_each = var.eks_oidc_provider_arn == null ? [] : [1]
    content {
      actions = ["sts:AssumeRoleWithWebIdentity"]
      principals {
        type        = "Federated"
        identifiers = [var.eks_oidc_provider_arn]
      }
      condition {
        test     = "StringEquals"
        variable = "${var.eks_oidc_issuer}:sub"
        values   = ["system:serviceaccount:${var.eks_namespace}:${var.eks_service_account}"]
      }
      condition {
        test     = "StringEquals"
        variable = "${var.eks_oidc_issuer}:aud"
        values   = ["sts.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "jobs" {
  name               = "${var.name}-jobs"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "jobs" {
  statement {
    sid       = "ReadArtifacts"
    actions   = ["s3:GetObject"]
    resources = ["${var.bucket_arn}/artifacts/*"]
  }
  statement {
    sid       = "ReadWriteState"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${var.bucket_arn}/checkpoints/*", "${var.bucket_arn}/delta/*", "${var.bucket_arn}/logs/jobs/*"]
  }
  statement {
    sid       = "ListState"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["artifacts/*", "checkpoints/*", "delta/*", "logs/jobs/*"]
    }
  }
  statement {
    sid       = "UseKmsKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.kms_key_arn]
  }
  statement {
    sid       = "ReadDatabaseSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.database_secret_arn]
  }
  dynamic "statement" {
    for_each = var.kafka_cluster_arn == null ? [] : [1]
    content {
      sid       = "KafkaConnect"
      actions   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"]
      resources = [var.kafka_cluster_arn]
    }
  }
  dynamic "statement" {
    for_each = var.kafka_cluster_arn == null ? [] : [1]
    content {
      sid     = "KafkaWriteTopics"
      actions = ["kafka-cluster:CreateTopic", "kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:ReadData"]
      # the connector's topics and no other prefix's: <prefix> (SQL Server's schema changes), <prefix>.<...> (the
      # tables', the transactions'), and __debezium-heartbeat.<prefix>
      resources = [for topic in [var.topic_prefix, "${var.topic_prefix}.*", "__debezium-heartbeat.${var.topic_prefix}"] :
      "${replace(var.kafka_cluster_arn, ":cluster/", ":topic/")}/${topic}"]
    }
  }
  dynamic "statement" {
    # ReadData needs AlterGroup on the reading consumer's group, as MSK's table of actions says: the quality
    # report reads the topics back through Spark's Kafka source, whose groups are spark-kafka-*
    for_each = var.kafka_cluster_arn == null ? [] : [1]
    content {
      sid       = "KafkaReadGroups"
      actions   = ["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"]
      resources = ["${replace(var.kafka_cluster_arn, ":cluster/", ":group/")}/spark-kafka-*"]
    }
  }
  dynamic "statement" {
    for_each = var.kafka_cluster_arn == null ? [] : [1]
    content {
      sid       = "KafkaIdempotentProducer"
      actions   = ["kafka-cluster:WriteDataIdempotently"]
      resources = [var.kafka_cluster_arn]
    }
  }
  statement {
    sid       = "PublishMetrics"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"] # PutMetricData has no resource; the condition keeps the role to cdckit's namespace
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metrics_namespace]
    }
  }
  statement {
    sid       = "WriteJobLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${var.log_group_arn}:*"]
  }
}

resource "aws_iam_role_policy" "jobs" {
  name   = "${var.name}-jobs"
  role   = aws_iam_role.jobs.id
  policy = data.aws_iam_policy_document.jobs.json
}
