#!/usr/bin/env bash
# Install steps of the cdckit job image; each runs alone, in the Dockerfile and in the test suite.
#
#   install.sh system-packages <msodbcsql18 version>   Microsoft ODBC Driver 18 + unixODBC, as root: with apt on
#                                                     Debian and Ubuntu (Apache's image), with dnf from
#                                                     Microsoft's RHEL 9 repository on Amazon Linux 2023 (EMR's);
#                                                     and Amazon RDS's certificate authorities in the system's
#                                                     trust store, which the driver verifies a server against
#   install.sh python <wheel folder>                   cdckit and its run-time extras (sqlserver, aws) from the
#                                                     wheel in the folder, over the image's own PySpark (it
#                                                     installs none)
#   install.sh jars <folder> <spark> <aws-msk-iam-auth> <hadoop-aws> <aws-sdk>
#                                                     Spark's Kafka connector for that Spark release, MSK IAM
#                                                     auth and S3A jars, Delta Lake's unless the image has its
#                                                     own (EMR's, in $EMR_DELTA_LIB), and the AWS SDK v2 modules
#                                                     they need unless the image has an SDK (EMR's, in
#                                                     $EMR_AWS_SDK_LIB); Maven only while it fetches them, when
#                                                     the image has none
#
# OS_RELEASE (default /etc/os-release), YUM_REPOS_DIR (/etc/yum.repos.d), APT_SOURCES_DIR
# (/etc/apt/sources.list.d), KEYRINGS_DIR (/usr/share/keyrings) and CA_ANCHORS_DIR (the family's folder of local
# certificate authorities) name where the system is described, where the package repositories and their keys go,
# and where RDS's authorities go.
set -euo pipefail

step="${1:?usage: install.sh system-packages|python|jars ...}"
shift

# The base image's Spark release ("4.0.2", or EMR's "4.0.2-amzn-0"), from $SPARK_HOME/RELEASE or its
# spark-submit; empty when neither is there.
image_spark() {
  local home="${SPARK_HOME:-/usr/lib/spark}"
  if [ -s "$home/RELEASE" ]; then
    awk 'NR == 1 && $1 == "Spark" { print $2 }' "$home/RELEASE"
  elif [ -x "$home/bin/spark-submit" ]; then
    "$home/bin/spark-submit" --version 2>&1 | sed -n '/Scala/d; s/.* version \([0-9][^ ]*\).*/\1/p' | head -n 1
  fi
}

# The system's family from os-release: "debian" (Debian, Ubuntu) or "rhel" (Amazon Linux 2023, RHEL and its kin).
os_family() {
  local ID="" ID_LIKE=""
  # shellcheck disable=SC1090
  . "${OS_RELEASE:-/etc/os-release}"
  case " $ID $ID_LIKE " in
    *" debian "*|*" ubuntu "*) echo debian ;;
    *" amzn "*|*" rhel "*|*" fedora "*|*" centos "*) echo rhel ;;
    *) echo "install.sh: no install path for $ID ($ID_LIKE): Debian, Ubuntu and Amazon Linux 2023 have one" >&2
       return 2 ;;
  esac
}

# The version of a pip-installed pyspark, empty when there is none (Spark's own images keep PySpark under
# $SPARK_HOME/python, not as a pip distribution).
# Amazon RDS's certificate authorities (every region's, one bundle), which sign the certificates RDS for SQL
# Server presents: SQL Server's ODBC driver verifies the server against the system's trust store (Encrypt=yes,
# TrustServerCertificate=no, RDS's rds.force_ssl=1), and no system carries them by default.
RDS_CA_BUNDLE_URL="https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem"

# One certificate per file, as Debian's update-ca-certificates takes them: $1 the bundle, $2 the folder.
split_certificates() {
  awk -v folder="$2" '
    /-----BEGIN CERTIFICATE-----/ { n++; file = sprintf("%s/amazon-rds-%03d.crt", folder, n) }
    n { print > file }
    /-----END CERTIFICATE-----/ { close(file) }
    END { if (!n) exit 1 }' "$1"
}

pip_pyspark() {
  { python3 -m pip show pyspark 2>/dev/null || true; } | sed -n 's/^Version: //p'
}

case "$step" in
  system-packages)
    version="${1:?msodbcsql18 version}"
    family="$(os_family)"
    if [ "$family" = debian ]; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get update
      apt-get install -y --no-install-recommends curl gnupg ca-certificates unixodbc
      # shellcheck disable=SC1090
      . "${OS_RELEASE:-/etc/os-release}"
      keyring="${KEYRINGS_DIR:-/usr/share/keyrings}/microsoft-prod.gpg"
      curl -fsSL https://packages.microsoft.com/keys/microsoft.asc | gpg --dearmor -o "$keyring"
      echo "deb [signed-by=$keyring] https://packages.microsoft.com/${ID}/${VERSION_ID}/prod ${VERSION_CODENAME} main" \
        > "${APT_SOURCES_DIR:-/etc/apt/sources.list.d}/mssql-release.list"
      apt-get update
      ACCEPT_EULA=Y apt-get install -y --no-install-recommends "msodbcsql18=${version}"
      rm -rf /var/lib/apt/lists/*
      anchors="${CA_ANCHORS_DIR:-/usr/local/share/ca-certificates}/amazon-rds"
      mkdir -p "$anchors"
      curl -fsSL "$RDS_CA_BUNDLE_URL" -o "$anchors/global-bundle.pem"
      split_certificates "$anchors/global-bundle.pem" "$anchors"
      rm "$anchors/global-bundle.pem"
      update-ca-certificates
    else
      # Amazon Linux 2023 is RHEL 9's kin for Microsoft's packages: its repository file, its signing key, the
      # driver's RPM of the same version as the Debian package (18.5.1.1-1)
      dnf install -y unixODBC
      curl -fsSL https://packages.microsoft.com/config/rhel/9/prod.repo -o "${YUM_REPOS_DIR:-/etc/yum.repos.d}/mssql-release.repo"
      ACCEPT_EULA=Y dnf install -y "msodbcsql18-${version}"
      dnf clean all
      # p11-kit reads a bundle of several certificates as it is
      curl -fsSL "$RDS_CA_BUNDLE_URL" -o "${CA_ANCHORS_DIR:-/etc/pki/ca-trust/source/anchors}/amazon-rds-global-bundle.pem"
      update-ca-trust extract
    fi
    ;;
  python)
    folder="${1:?wheel folder}"
    wheel="$(find "$folder" -maxdepth 1 -name 'cdckit-*.whl' | sort | tail -n 1)"
    before="$(pip_pyspark)"
    # The system Python is the one Spark runs (PYSPARK_PYTHON=python3) and the image has no other use, so cdckit
    # goes into it, not a virtualenv; Ubuntu 24.04 and later refuse that (PEP 668) unless told. Older pips
    # ignore the variable.
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir "${wheel}[sqlserver,aws]"
    after="$(pip_pyspark)" spark="$(image_spark)"
    if [ "$after" != "$before" ]; then
      echo "install.sh: installing cdckit changed the pip-installed pyspark from ${before:-none} to" \
           "${after:-none} on an image whose Spark is ${spark:-unknown}: an extra or one of its dependencies" \
           "requires pyspark; remove that requirement, the image's own PySpark must stay the only one" >&2
      exit 1
    fi
    if [ -n "$after" ] && [ -n "$spark" ] && [ "${after%%-*}" != "${spark%%-*}" ]; then
      echo "install.sh: the base image has a pip-installed pyspark $after but runs Spark $spark; use a base" \
           "image whose PySpark matches its Spark" >&2
      exit 1
    fi
    ;;
  jars)
    target="${1:?jar folder}" spark_version="${2:?Spark version}" msk="${3:?aws-msk-iam-auth version}"
    hadoop="${4:?hadoop-aws version}" sdk="${5:?AWS SDK v2 version}"
    spark="$(image_spark)"
    if [ -n "$spark" ] && [ "${spark%%-*}" != "${spark_version%%-*}" ]; then
      echo "install.sh: SPARK_VERSION is $spark_version but the base image runs Spark $spark; build with" \
           "--build-arg SPARK_VERSION=${spark%%-*} (the Kafka connector must match the image's Spark)" >&2
      exit 1
    fi
    delta=()
    # EMR's images carry the Delta release of their runtime, which the delta-defaults classification (or
    # spark.jars from this folder) switches on: a second copy on Spark's class path would clash with it.
    if compgen -G "${EMR_DELTA_LIB:-/usr/share/aws/delta/lib}/delta-spark*.jar" >/dev/null; then
      delta=(--no-delta)
    fi
    # hadoop-aws and aws-msk-iam-auth need the AWS SDK v2: EMR's images carry one (a second on the class path
    # would clash with it), Apache's none
    aws_sdk=(--aws-sdk "$sdk")
    if [ -n "$(find "${EMR_AWS_SDK_LIB:-/usr/share/aws/aws-java-sdk-v2}" -name '*.jar' -print -quit 2>/dev/null)" ]; then
      aws_sdk=()
    fi
    # Maven resolves the jars once; an image without it gets it for this step only
    maven=""
    if ! command -v mvn >/dev/null; then
      maven="$(os_family)"
      if [ "$maven" = debian ]; then
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends maven
      else
        dnf install -y maven
      fi
    fi
    python3 -m cdckit.artifacts spark-jars "$target" --spark "$spark_version" --msk-iam-auth "$msk" \
      --hadoop-aws "$hadoop" "${delta[@]}" "${aws_sdk[@]}"
    if [ "$maven" = debian ]; then
      apt-get purge -y --auto-remove maven && rm -rf /var/lib/apt/lists/*
    elif [ "$maven" = rhel ]; then
      dnf remove -y maven && dnf clean all
    fi
    ;;
  *)
    echo "install.sh: unknown step $step (system-packages, python, jars)" >&2
    exit 2
    ;;
esac
