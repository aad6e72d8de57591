"""Apache Kafka's own shell tools (kafka-topics, the console producer and consumer, kafka-consumer-groups,
kafka-configs, kafka-acls) run as JVM processes from the jars `make kafka` resolves into .jars/kafka.

Each run is one JVM with a bounded heap and a timeout (subprocess.run kills it when the timeout
passes, so no JVM outlives its call). Logging is slf4j-simple's at WARN on stderr, so stdout holds
only what the tool prints. A client properties file per identity (security protocol, SASL mechanism,
JAAS line, a PEM truststore for TLS) is what each tool takes with --command-config (or the console
tools' --producer.config / --consumer.config).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / ".jars" / "kafka"

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
ACLS = "org.apache.kafka.tools.AclCommand"

JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def client_properties(path: Path, user: str, password: str, mechanism: str, *, ca_pem: str | None = None) -> Path:
    """A client properties file for SASL (SASL_SSL with a PEM truststore when `ca_pem` is given)."""
    lines = [f"security.protocol={'SASL_SSL' if ca_pem else 'SASL_PLAINTEXT'}", f"sasl.mechanism={mechanism}",
             "sasl.jaas.config=org.apache.kafka.common.security."
             + ("plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule")
             + f' required username="{user}" password="{password}";']
    if ca_pem:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={ca_pem}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class KafkaTools:
    """Runs the tools; `runs` counts the JVMs started (tests keep it small)."""

    timeout_s: float = 120.0
    runs: int = 0

    def __post_init__(self) -> None:
        if shutil.which("java") is None:
            raise RuntimeError("java is not on PATH (a JDK 17 is part of `make setup`)")
        if not any(JARS.glob("kafka-tools-*.jar")):
            raise RuntimeError(f"Kafka's jars are missing from {JARS}: run `make kafka`")

    def run(self, main: str, *args: str, stdin: str | None = None, check: bool = True,
            timeout_s: float | None = None) -> subprocess.CompletedProcess:
        """One tool run; with `check`, a non-zero exit raises with its output."""
        self.runs += 1
        cmd = ["java", *JVM_FLAGS, "-cp", f"{JARS}/*", main, *args]
        res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout_s or self.timeout_s)
        if check and res.returncode != 0:
            raise AssertionError(f"{main} {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
        return res
