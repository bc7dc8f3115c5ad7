"""A TensorFlow-style replica without TensorFlow: it reads TF_CONFIG as tf.distribute would and
reports it. The chief waits for every other replica's report before it exits, since the job
succeeds (and the rest are stopped) when the chief does."""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    report = {"replica": os.environ["CUBE_REPLICA"], "tf_config": config}
    with open(os.path.join(args.out, f"{task['type']}-{task['index']}.json"), "w") as out:
        json.dump(report, out)
    if task["type"] == "chief":
        deadline = time.monotonic() + 60
        while len([n for n in os.listdir(args.out) if n.endswith(".json")]) < args.expect:
            if time.monotonic() > deadline:
                raise SystemExit("the other replicas never reported")
            time.sleep(0.05)


if __name__ == "__main__":
    main()
