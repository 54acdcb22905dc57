# CloudWatch alarms on what a CDC pipeline must not do silently: fall behind, fail, or stop.
resource "aws_sns_topic" "alarms" {
  name              = "${var.name}-cdckit-alarms"
  kms_master_key_id = var.kms_key_arn
  tags              = var.tags
}

resource "aws_sns_topic_subscription" "email" {
  for_each  = toset(var.alarm_emails)
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.value
}

resource "aws_cloudwatch_metric_alarm" "failed_jobs" {
  alarm_name          = "${var.name}-cdckit-failed-jobs"
  alarm_description   = "A cdckit job run failed on EMR Serverless: see the job's driver log."
  namespace           = "AWS/EMRServerless"
  metric_name         = "FailedJobs"
  dimensions          = { ApplicationId = var.application_id }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "stream_stopped" {
  alarm_name          = "${var.name}-cdckit-stream-not-running"
  alarm_description   = "No cdckit job is running: the stream stopped, so the source keeps its log and consumers fall behind."
  namespace           = "AWS/EMRServerless"
  metric_name         = "RunningJobs"
  dimensions          = { ApplicationId = var.application_id }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "slot_lag" {
  count               = var.postgres_instance_id == null ? 0 : 1
  alarm_name          = "${var.name}-cdckit-slot-lag"
  alarm_description   = "The replication slot holds more than ${var.max_slot_lag_mb} MB of WAL: the stream is behind or stopped."
  namespace           = "AWS/RDS"
  metric_name         = "OldestReplicationSlotLag"
  dimensions          = { DBInstanceIdentifier = var.postgres_instance_id }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  threshold           = var.max_slot_lag_mb * 1024 * 1024
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "kafka_disk" {
  count               = var.kafka_cluster_name == null ? 0 : 1
  alarm_name          = "${var.name}-cdckit-kafka-disk"
  alarm_description   = "An MSK broker's data disk is over 80% full."
  namespace           = "AWS/Kafka"
  metric_name         = "KafkaDataLogsDiskUsed"
  dimensions          = { "Cluster Name" = var.kafka_cluster_name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  threshold           = 80
  comparison_operator = "GreaterThanThreshold"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}
