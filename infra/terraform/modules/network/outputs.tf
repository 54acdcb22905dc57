output "vpc_id" {
  description = "The VPC the jobs, Kafka and the database run in."
  value       = local.create ? aws_vpc.this[0].id : var.vpc_id
}

output "private_subnet_ids" {
  description = "Private subnets for the jobs, Kafka brokers and the database."
  value       = local.create ? aws_subnet.private[*].id : var.private_subnet_ids
}

output "jobs_security_group_id" {
  description = "Security group of the Spark jobs (allowed in by Kafka and the database)."
  value       = aws_security_group.jobs.id
}

output "cidr_block" {
  description = "CIDR block of the VPC."
  value       = local.create ? var.cidr_block : var.vpc_cidr_block
}
