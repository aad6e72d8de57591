"""A Spark driver process for tests that kill one: streams a topic's committed records from the
remote tier into a Delta table with `spark.readStream.format(<reader>)` ... `writeStream.format("delta")`
and a checkpoint, until killed (`--available-now`: until what is tiered now is in the table, then
the table's rows are written to `--rows-out` as JSON lines `[partition, offset, value]`).

Run as `python -m tests.support.stream_driver ...` from the repository root, in a session of its
own (the test SIGKILLs the process group: this Python process, Spark's JVM and its workers)."""

from __future__ import annotations

import argparse
import json

from lakelog.spark_log.session import remote_session

TRIGGER = "500 milliseconds"


def main() -> None:
    a = argparse.ArgumentParser()
    a.add_argument("--remote", required=True)
    a.add_argument("--topic", required=True)
    a.add_argument("--table", required=True)
    a.add_argument("--checkpoint", required=True)
    a.add_argument("--reader", default="lakelog")
    a.add_argument("--available-now", action="store_true")
    a.add_argument("--rows-out")
    args = a.parse_args()
    spark = remote_session(None, app_name="lakelog-stream-driver", master="local[2]",
                           conf={"spark.ui.showConsoleProgress": "false"})
    try:
        stream = (spark.readStream.format(args.reader).option("remote", args.remote).option("topic", args.topic)
                  .load().select("partition", "offset", "value"))
        writer = stream.writeStream.format("delta").option("checkpointLocation", args.checkpoint)
        writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime=TRIGGER)
        query = writer.start(args.table)
        print("streaming", flush=True)
        query.awaitTermination()
        if args.rows_out:
            rows = spark.read.format("delta").load(args.table).collect()
            with open(args.rows_out, "w") as f:
                for r in rows:
                    f.write(json.dumps([r["partition"], r["offset"], bytes(r["value"]).decode()]) + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
