# Amazon MSK, provisioned: IAM authentication over TLS only, encrypted at rest with the kit's key, broker logs
# to CloudWatch, reachable only from the jobs' security group.
resource "aws_security_group" "kafka" {
  name        = "${var.name}-kafka"
  description = "MSK brokers: IAM/TLS listener from the cdckit jobs only"
  vpc_id      = var.vpc_id
  ingress {
    description     = "Kafka IAM/TLS from the jobs"
    from_port       = 9098
    to_port         = 9098
    protocol        = "tcp"
    security_groups = [var.client_security_group_id]
  }
  egress {
    description = "within the VPC"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = [var.vpc_cidr_block]
  }
  tags = var.tags
}

resource "aws_cloudwatch_log_group" "brokers" {
  name              = "/cdckit/${var.name}/msk"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = var.tags
}

resource "aws_msk_configuration" "this" {
  name           = "${var.name}-kafka"
  kafka_versions = [var.kafka_version]
  server_properties = join("\n", [
    "auto.create.topics.enable=false",
    "default.replication.factor=${min(3, var.broker_count)}",
    "min.insync.replicas=${min(2, var.broker_count)}",
    "unclean.leader.election.enable=false",
  ])
}

resource "aws_msk_cluster" "this" {
  cluster_name           = "${var.name}-kafka"
  kafka_version          = var.kafka_version
  number_of_broker_nodes = var.broker_count
  enhanced_monitoring    = "PER_TOPIC_PER_PARTITION"

  broker_node_group_info {
    instance_type   = var.instance_type
    client_subnets  = var.subnet_ids
    security_groups = [aws_security_group.kafka.id]
    storage_info {
      ebs_storage_info {
        volume_size = var.volume_size_gb
      }
    }
  }

  client_authentication {
    unauthenticated = false
    sasl {
      iam = true
    }
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = var.kms_key_arn
    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.this.arn
    revision = aws_msk_configuration.this.latest_revision
  }

  open_monitoring {
    prometheus {
      jmx_exporter {
        enabled_in_broker = true
      }
      node_exporter {
        enabled_in_broker = true
      }
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.brokers.name
      }
    }
  }

  tags = var.tags
}
