# The Kubernetes path: the Kubeflow Spark operator on an existing EKS cluster, a namespace for the jobs and the
# service account their pods run as (bound to the jobs' IAM role through IRSA).
resource "kubernetes_namespace_v1" "jobs" {
  metadata {
    name   = var.namespace
    labels = var.labels
  }
}

resource "kubernetes_service_account_v1" "jobs" {
  metadata {
    name      = var.service_account
    namespace = kubernetes_namespace_v1.jobs.metadata[0].name
    annotations = {
      "eks.amazonaws.com/role-arn" = var.jobs_role_arn
    }
    labels = var.labels
  }
  automount_service_account_token = true
}

resource "helm_release" "spark_operator" {
  name             = "spark-operator"
  repository       = var.chart_repository
  chart            = "spark-operator"
  version          = var.chart_version
  namespace        = var.operator_namespace
  create_namespace = true
  values = [yamlencode({
    spark   = { jobNamespaces = [var.namespace] }
    webhook = { enable = true }
  })]
}
