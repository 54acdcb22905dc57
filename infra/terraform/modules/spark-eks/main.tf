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

# The driver creates, watches and deletes its executors' pods and the service they reach it by (Spark's "Running on
# Kubernetes", RBAC): a Role in the jobs' namespace, for the jobs' service account only.
resource "kubernetes_role_v1" "driver" {
  metadata {
    name      = "${var.service_account}-driver"
    namespace = kubernetes_namespace_v1.jobs.metadata[0].name
    labels    = var.labels
  }
  rule {
    api_groups = [""]
    resources  = ["pods", "services", "configmaps", "persistentvolumeclaims"]
    verbs      = ["create", "get", "list", "watch", "update", "patch", "delete", "deletecollection"]
  }
}

resource "kubernetes_role_binding_v1" "driver" {
  metadata {
    name      = "${var.service_account}-driver"
    namespace = kubernetes_namespace_v1.jobs.metadata[0].name
    labels    = var.labels
  }
  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.driver.metadata[0].name
  }
  subject {
    kind      = "ServiceAccount"
    name      = kubernetes_service_account_v1.jobs.metadata[0].name
    namespace = kubernetes_namespace_v1.jobs.metadata[0].name
  }
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
  # the chart creates its spark ServiceAccount and Role in each of jobNamespaces, which must exist first (its
  # values.yaml: "Make sure the namespaces have already existed")
  depends_on = [kubernetes_namespace_v1.jobs]
}
