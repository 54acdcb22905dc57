output "alarm_topic_arn" {
  description = "SNS topic the alarms notify (subscribe chat or paging tools to it)."
  value       = aws_sns_topic.alarms.arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the connector's metrics."
  value       = aws_cloudwatch_dashboard.cdckit.dashboard_name
}
