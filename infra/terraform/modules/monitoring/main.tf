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

# A job run that failed or was cancelled, from EMR Serverless's own job run state change events. From release 7.10 on,
# EMR Serverless no longer updates its metrics by ApplicationId alone (AWS: "Monitoring EMR Serverless applications
# and jobs"), so alarms on them would never see data; the events come for every run, by application. A cancelled run
# is reported too: EMR cancels a run that times out, and make deploy cancels the stream to upgrade it.
resource "aws_cloudwatch_event_rule" "job_run_ended" {
  name        = "${var.name}-cdckit-job-run-ended"
  description = "A cdckit job run failed or was cancelled on EMR Serverless: see its driver log; make deploy starts the stream again."
  event_pattern = jsonencode({
    source        = ["aws.emr-serverless"]
    "detail-type" = ["EMR Serverless Job Run State Change"]
    detail = {
      applicationId = [var.application_id]
      state         = ["FAILED", "CANCELLED"]
    }
  })
  tags = var.tags
}

resource "aws_cloudwatch_event_target" "job_run_ended" {
  rule = aws_cloudwatch_event_rule.job_run_ended.name
  arn  = aws_sns_topic.alarms.arn
}

# Who may publish to the topic: CloudWatch's alarms and EventBridge's rule, for this account only.
data "aws_caller_identity" "current" {}

data "aws_iam_policy_document" "alarms" {
  statement {
    sid       = "AlarmsAndEventsOfThisAccountPublish"
    actions   = ["sns:Publish"]
    resources = [aws_sns_topic.alarms.arn]
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com", "events.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_sns_topic_policy" "alarms" {
  arn    = aws_sns_topic.alarms.arn
  policy = data.aws_iam_policy_document.alarms.json
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

# MSK publishes KafkaDataLogsDiskUsed per broker (dimensions "Cluster Name" and "Broker ID", MSK's metrics table):
# the alarm watches the fullest broker's disk, a metric math MAX over every broker's
resource "aws_cloudwatch_metric_alarm" "kafka_disk" {
  count               = var.kafka_cluster_name == null ? 0 : 1
  alarm_name          = "${var.name}-cdckit-kafka-disk"
  alarm_description   = "An MSK broker's data disk is over 80% full."
  evaluation_periods  = 2
  threshold           = 80
  comparison_operator = "GreaterThanThreshold"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags

  metric_query {
    id          = "fullest"
    expression  = "MAX([${join(", ", [for broker in range(1, var.kafka_broker_count + 1) : "b${broker}"])}])"
    label       = "the fullest broker's data disk (%)"
    return_data = true
  }
  dynamic "metric_query" {
    for_each = range(1, var.kafka_broker_count + 1)
    content {
      id = "b${metric_query.value}"
      metric {
        namespace   = "AWS/Kafka"
        metric_name = "KafkaDataLogsDiskUsed"
        dimensions  = { "Cluster Name" = var.kafka_cluster_name, "Broker ID" = tostring(metric_query.value) }
        stat        = "Maximum"
        period      = 300
      }
    }
  }
}

# -- Debezium's metrics, which the jobs send to CloudWatch (cdckit.metrics.cloudwatch.namespace) ---------------------
locals {
  postgres = var.connector != "sqlserver"
  # the dimensions cdckit sends each streaming value with, per captured database
  streaming = { for database in var.database_names : database => {
    Connector = var.topic_prefix
    Context   = "streaming"
    Database  = database
  } }
}

resource "aws_cloudwatch_metric_alarm" "lag" {
  for_each            = local.streaming
  alarm_name          = "${var.name}-cdckit-lag-${each.key}"
  alarm_description   = "cdckit is more than ${var.max_lag_seconds} s behind ${each.key} (MilliSecondsBehindSource), or stopped reporting."
  namespace           = var.metrics_namespace
  metric_name         = "MilliSecondsBehindSource"
  dimensions          = each.value
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  threshold           = var.max_lag_seconds * 1000
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "breaching" # a running stream reports at least every 10 s, idle or not
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

# The stream reports its metrics at least every 10 s while it runs, idle or not: none for 15 min means no stream
# runs (a snapshot running meanwhile does not hide it, as an application-wide count of running jobs would).
resource "aws_cloudwatch_metric_alarm" "stream_not_running" {
  for_each            = local.streaming
  alarm_name          = "${var.name}-cdckit-stream-not-running-${each.key}"
  alarm_description   = "No cdckit stream has reported on ${each.key} for 15 minutes: it stopped, so the source keeps its log and consumers fall behind. make deploy starts it again from its checkpoint."
  namespace           = var.metrics_namespace
  metric_name         = "MilliSecondsBehindSource"
  dimensions          = each.value
  statistic           = "SampleCount"
  period              = 300
  evaluation_periods  = 3
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "disconnected" {
  for_each            = local.streaming
  alarm_name          = "${var.name}-cdckit-disconnected-${each.key}"
  alarm_description   = "cdckit cannot reach ${each.key} (Connected is 0)."
  namespace           = var.metrics_namespace
  metric_name         = "Connected"
  dimensions          = each.value
  statistic           = "Minimum"
  period              = 60
  evaluation_periods  = 3
  threshold           = 1
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "notBreaching" # a stopped stream is the lag alarm's
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "slot_retained_wal" {
  for_each            = local.postgres ? local.streaming : {}
  alarm_name          = "${var.name}-cdckit-slot-wal-${each.key}"
  alarm_description   = "The replication slot keeps more than ${var.max_slot_lag_mb} MB of WAL on ${each.key} (SlotRetainedWalBytes): the stream is behind or stopped, and the server's disk fills."
  namespace           = var.metrics_namespace
  metric_name         = "SlotRetainedWalBytes"
  dimensions          = each.value
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  threshold           = var.max_slot_lag_mb * 1024 * 1024
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "capture_latency" {
  for_each            = local.postgres ? {} : local.streaming
  alarm_name          = "${var.name}-cdckit-capture-latency-${each.key}"
  alarm_description   = "SQL Server's capture job on ${each.key} is more than ${var.max_capture_latency_seconds} s behind the log (CaptureJobLatencySeconds): changes reach the change tables late."
  namespace           = var.metrics_namespace
  metric_name         = "CaptureJobLatencySeconds"
  dimensions          = each.value
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  threshold           = var.max_capture_latency_seconds
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "cleanup_margin" {
  for_each            = local.postgres ? {} : local.streaming
  alarm_name          = "${var.name}-cdckit-cleanup-margin-${each.key}"
  alarm_description   = "On ${each.key}, fewer than ${var.min_cleanup_margin_hours} h of changes lie between SQL Server's cleanup low-water mark and cdckit's position (CleanupMarginSeconds): the cleanup job will soon remove changes cdckit has not read."
  namespace           = var.metrics_namespace
  metric_name         = "CleanupMarginSeconds"
  dimensions          = each.value
  statistic           = "Minimum"
  period              = 300
  evaluation_periods  = 1
  threshold           = var.min_cleanup_margin_hours * 3600
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = var.tags
}

resource "aws_cloudwatch_dashboard" "cdckit" {
  dashboard_name = "${var.name}-cdckit"
  # SEARCH expressions over the Connector dimension: every captured database shows, without listing them
  dashboard_body = templatefile("${path.module}/dashboard.json.tftpl", {
    namespace = var.metrics_namespace
    connector = var.topic_prefix
    region    = data.aws_region.current.name
  })
}

data "aws_region" "current" {}
