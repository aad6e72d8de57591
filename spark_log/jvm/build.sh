#!/usr/bin/env bash
# Builds spark_log/jvm/lakelog-spark.jar (the JVM `lakelog` data source) with the JDK's javac
# against the jars of the installed pyspark wheel: nothing is downloaded. Usage:
#   spark_log/jvm/build.sh [PYTHON]      (PYTHON: the interpreter whose pyspark to compile against)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${1:-python3}"
jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
command -v javac >/dev/null || { echo "javac not found: install a JDK 17 (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
javac --release 17 -nowarn -encoding UTF-8 -cp "$jars/*" -d "$out/classes" $(find "$here/src" -name '*.java' | sort)
cp -r "$here/resources/." "$out/classes/"
jar --create --file "$out/lakelog-spark.jar" -C "$out/classes" .
mv "$out/lakelog-spark.jar" "$here/lakelog-spark.jar"
echo "built $here/lakelog-spark.jar"
