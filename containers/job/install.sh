#!/usr/bin/env bash
# Install steps of the cdckit job image; each runs alone, in the Dockerfile and in the test suite.
#
#   install.sh system-packages <msodbcsql18 version>   Microsoft ODBC Driver 18 + unixODBC, as root: with apt on
#                                                     Debian and Ubuntu (Apache's image), with dnf from
#                                                     Microsoft's RHEL 9 repository on Amazon Linux 2023 (EMR's)
#   install.sh python <wheel folder>                   cdckit and its run-time extras (sqlserver, aws) from the
#                                                     wheel in the folder, over the image's own PySpark (it
#                                                     installs none)
#   install.sh jars <folder> <spark> <aws-msk-iam-auth> <hadoop-aws>
#                                                     Spark's Kafka connector for that Spark release, MSK IAM
#                                                     auth and S3A jars, and Delta Lake's unless the image has
#                                                     its own (EMR's, in $EMR_DELTA_LIB); Maven only while it
#                                                     fetches them, when the image has none
#
# OS_RELEASE (default /etc/os-release) and YUM_REPOS_DIR (default /etc/yum.repos.d) name where the system is
# described and where dnf's repositories go.
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
      . "${OS_RELEASE:-/etc/os-release}"
      curl -fsSL https://packages.microsoft.com/keys/microsoft.asc | gpg --dearmor -o /usr/share/keyrings/microsoft-prod.gpg
      echo "deb [signed-by=/usr/share/keyrings/microsoft-prod.gpg] https://packages.microsoft.com/${ID}/${VERSION_ID}/prod ${VERSION_CODENAME} main" \
        > /etc/apt/sources.list.d/mssql-release.list
      apt-get update
      ACCEPT_EULA=Y apt-get install -y --no-install-recommends "msodbcsql18=${version}"
      rm -rf /var/lib/apt/lists/*
    else
      # Amazon Linux 2023 is RHEL 9's kin for Microsoft's packages: its repository file, its signing key, the
      # driver's RPM of the same version as the Debian package (18.5.1.1-1)
      dnf install -y unixODBC
      curl -fsSL https://packages.microsoft.com/config/rhel/9/prod.repo -o "${YUM_REPOS_DIR:-/etc/yum.repos.d}/mssql-release.repo"
      ACCEPT_EULA=Y dnf install -y "msodbcsql18-${version}"
      dnf clean all
    fi
    ;;
  python)
    folder="${1:?wheel folder}"
    wheel="$(ls "$folder"/cdckit-*.whl | sort | tail -n 1)"
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
    hadoop="${4:?hadoop-aws version}"
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
      --hadoop-aws "$hadoop" "${delta[@]}"
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
