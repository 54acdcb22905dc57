output "cluster_arn" {
  description = "The MSK cluster (for the jobs' IAM policy)."
  value       = aws_msk_cluster.this.arn
}

output "bootstrap_servers" {
  description = "kafka.bootstrap.servers for IAM authentication over TLS."
  value       = aws_msk_cluster.this.bootstrap_brokers_sasl_iam
}

output "cluster_name" {
  description = "Cluster name (for CloudWatch alarms)."
  value       = aws_msk_cluster.this.cluster_name
}
