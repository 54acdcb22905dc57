output "alarm_topic_arn" {
  description = "SNS topic the alarms notify (subscribe chat or paging tools to it)."
  value       = aws_sns_topic.alarms.arn
}
