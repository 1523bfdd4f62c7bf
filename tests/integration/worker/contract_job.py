"""A tiny job that follows the agent/runtime contract without torch, for supervision tests.

It prints its environment, then "trains": every STEP_S seconds one iteration, appending a
progress record to HADAR_PROGRESS_FILE. On SIGTERM it checkpoints and exits 0 with an
``exit``/``stopped`` record; at the end of its budget it writes ``lease_done`` (or
``completed`` when the job's iterations are all done). TEST_MODE changes the behaviour:
``fail`` (writes to stderr, exits 3), ``ignore_term`` (ignores SIGTERM, never ends),
``print`` (prints lines slowly until stopped, no progress file).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

CONTRACT_VARS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
)


def main() -> int:
    env = {k: v for k, v in os.environ.items() if k.startswith("HADAR_") or k in CONTRACT_VARS}
    env["USER_VAR"] = os.environ.get("USER_VAR", "")
    env["CWD"] = str(Path.cwd())
    env["UID"] = str(os.getuid())
    print("ENV " + json.dumps(env, sort_keys=True), flush=True)
    mode = os.environ.get("TEST_MODE", "train")
    step_s = float(os.environ.get("STEP_S", "0.02"))
    if mode == "fail":
        print("about to fail", flush=True)
        print("Traceback: boom, the model exploded", file=sys.stderr, flush=True)
        return 3
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        while True:
            time.sleep(0.05)
    if mode == "print":
        n = 0
        while True:
            print(f"line {n}", flush=True)
            n += 1
            time.sleep(step_s)

    stop = {"requested": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))
    total = int(os.environ["HADAR_ITERATIONS"])
    done = int(os.environ["HADAR_ITERATIONS_DONE"])
    budget = int(os.environ["HADAR_ITERATION_BUDGET"])
    target = min(total, done + budget) if budget else total
    progress = Path(os.environ["HADAR_PROGRESS_FILE"]).open("a")  # noqa: SIM115

    def record(event: str, reason: str | None = None) -> None:
        line = {
            "event": event,
            "iterations_done": done,
            "iterations_per_s": 1.0 / step_s,
            "samples_per_s": 32.0 / step_s,
            "loss": 1.0 / (1 + done),
            "checkpoint_iterations": done if event != "progress" else 0,
            "at": time.time(),
            "exit_reason": reason,
        }
        progress.write(json.dumps(line) + "\n")
        progress.flush()

    while done < target and not stop["requested"]:
        time.sleep(step_s)
        done += 1
        record("progress")
    record("checkpoint")
    if stop["requested"]:
        record("exit", "stopped")
    elif done >= total:
        record("exit", "completed")
    else:
        record("exit", "lease_done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
