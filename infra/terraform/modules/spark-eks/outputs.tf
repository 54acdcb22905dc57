output "namespace" {
  description = "Where make deploy applies the SparkApplications."
  value       = kubernetes_namespace_v1.jobs.metadata[0].name
}

output "service_account" {
  description = "spark.kubernetes.authenticate.driver.serviceAccountName of the jobs."
  value       = kubernetes_service_account_v1.jobs.metadata[0].name
}
