#!/usr/bin/env bash
# Install steps of the cdckit job image; each runs alone, in the Dockerfile and in the test suite.
#
#   install.sh system-packages <msodbcsql18 version>   Microsoft ODBC Driver 18 + unixODBC (Debian/Ubuntu, as root)
#   install.sh python <wheel folder>                   cdckit and its extras from the wheel in the folder
#   install.sh jars <folder> <spark-sql-kafka> <aws-msk-iam-auth> <hadoop-aws>
#                                                     Spark's Kafka connector, MSK IAM auth and S3A jars
set -euo pipefail

step="${1:?usage: install.sh system-packages|python|jars ...}"
shift

case "$step" in
  system-packages)
    version="${1:?msodbcsql18 version}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends curl gnupg ca-certificates unixodbc maven
    . /etc/os-release
    curl -fsSL https://packages.microsoft.com/keys/microsoft.asc | gpg --dearmor -o /usr/share/keyrings/microsoft-prod.gpg
    echo "deb [signed-by=/usr/share/keyrings/microsoft-prod.gpg] https://packages.microsoft.com/${ID}/${VERSION_ID}/prod ${VERSION_CODENAME} main" \
      > /etc/apt/sources.list.d/mssql-release.list
    apt-get update
    ACCEPT_EULA=Y apt-get install -y --no-install-recommends "msodbcsql18=${version}"
    rm -rf /var/lib/apt/lists/*
    ;;
  python)
    folder="${1:?wheel folder}"
    wheel="$(ls "$folder"/cdckit-*.whl | sort | tail -n 1)"
    python3 -m pip install --no-cache-dir "${wheel}[sqlserver,aws,quality]"
    ;;
  jars)
    target="${1:?jar folder}" kafka="${2:?spark-sql-kafka version}" msk="${3:?aws-msk-iam-auth version}"
    hadoop="${4:?hadoop-aws version}"
    mkdir -p "$target"
    python3 -m cdckit.artifacts spark-jars "$target" --kafka "$kafka" --msk-iam-auth "$msk" --hadoop-aws "$hadoop"
    ;;
  *)
    echo "install.sh: unknown step $step (system-packages, python, jars)" >&2
    exit 2
    ;;
esac
