# Shared by envs/dev and envs/prod (linked into each): the Kubernetes and Helm providers, on the EKS cluster the jobs
# run on when runtime = "eks" (unused, and connecting nowhere, on EMR Serverless).
data "aws_eks_cluster" "jobs" {
  count = var.runtime == "eks" ? 1 : 0
  name  = var.eks_cluster_name
}

data "aws_eks_cluster_auth" "jobs" {
  count = var.runtime == "eks" ? 1 : 0
  name  = var.eks_cluster_name
}

locals {
  kubernetes = {
    host                   = try(data.aws_eks_cluster.jobs[0].endpoint, null)
    cluster_ca_certificate = try(base64decode(data.aws_eks_cluster.jobs[0].certificate_authority[0].data), null)
    token                  = try(data.aws_eks_cluster_auth.jobs[0].token, null)
  }
}

provider "kubernetes" {
  host                   = local.kubernetes.host
  cluster_ca_certificate = local.kubernetes.cluster_ca_certificate
  token                  = local.kubernetes.token
}

provider "helm" {
  kubernetes = local.kubernetes
}
