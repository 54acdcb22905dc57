# Remote state in S3 with S3-native locking. The bucket, key and region come from backend.hcl (copy
# backend.hcl.example), so no account-specific value lives in the code:
#   terraform init -backend-config=backend.hcl
terraform {
  backend "s3" {
    encrypt      = true
    use_lockfile = true
  }
}
