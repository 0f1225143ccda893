# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the example training scripts in resources/examples/, started the way ptw starts them.

Each test launches the ranks with a torchrun-style environment and PTW_METRICS naming a FIFO that a
thread here reads, as ptw does, and checks that the records each rank reported carry exactly the
losses it printed (`step N loss L`), for every step. Skipped, saying why, without torch or mpi4py.
Run from this folder (CTest's ptw_examples_py does):
    PYTHONPATH=../../resources/python /usr/bin/python3 -m unittest -v test_examples
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(SOURCE, "resources", "examples")
MODULE_DIR = os.path.join(SOURCE, "resources", "python")
LINE = re.compile(r"step (\d+) loss (\S+)")


def importable(name):
    return subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode == 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_all(commands, timeout=120):
    """Starts each (args, kwargs) at once and waits for all; returns (returncodes, outputs). The
    output goes to files, as ranks blocked on a full pipe would stall their peers in collectives."""
    with tempfile.TemporaryDirectory() as directory:
        files = [open(os.path.join(directory, f"out{i}"), "w+") for i in range(len(commands))]
        processes = [subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, text=True, **kwargs)
                     for (args, kwargs), f in zip(commands, files)]
        try:
            codes = [p.wait(timeout=timeout) for p in processes]
        finally:
            for p in processes:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        outputs = []
        for f in files:
            f.seek(0)
            outputs.append(f.read())
            f.close()
        return codes, outputs


class FifoReader:
    """Reads the FIFO's lines on a thread until every writer has closed it, as ptw does."""

    def __init__(self, path):
        os.mkfifo(path)
        self.path, self.lines = path, []
        # O_RDWR for the open, so it returns at once and EOF waits for close(); a reader of its own
        # then keeps the FIFO open for the writers.
        self.keep = os.open(path, os.O_RDWR)
        self.fd = os.open(path, os.O_RDONLY)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        buffer = b""
        while True:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                break
            buffer += chunk
        self.lines = buffer.decode().splitlines()

    def records(self):
        os.close(self.keep)  # the writers have exited: EOF ends the thread
        self.thread.join(timeout=30)
        os.close(self.fd)
        return [json.loads(line) for line in self.lines]


class ExamplesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.reader = FifoReader(os.path.join(self.dir.name, "metrics"))

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "PTW_METRICS", "OMPI_COMM_WORLD_RANK")}
        env.update(PYTHONUNBUFFERED="1", PTW_METRICS=self.reader.path,
                   PYTHONPATH=MODULE_DIR + os.pathsep + env.get("PYTHONPATH", ""), **extra)
        return env

    def printed_losses(self, output):
        """{step: loss} from the `step N loss L` lines, loss parsed as the exact float printed."""
        return {int(m.group(1)): float(m.group(2)) for m in map(LINE.fullmatch, output.splitlines()) if m}

    def check_records(self, outputs, records, steps):
        for rank, output in enumerate(outputs):
            printed = self.printed_losses(output)
            self.assertEqual(sorted(printed), list(range(1, steps + 1)), f"rank {rank} printed\n{output[-2000:]}")
            mine = {r["step"]: r for r in records if r["rank"] == rank}
            self.assertEqual(sorted(mine), list(range(1, steps + 1)), f"rank {rank}'s records")
            for step, loss in printed.items():
                self.assertEqual(mine[step]["loss"], loss, f"rank {rank} step {step}")
                self.assertGreater(mine[step]["samples"], 0)
        self.assertEqual(len(records), len(outputs) * steps)

    @unittest.skipUnless(importable("torch"), "python3 has no torch")
    def test_ddp_train_reports_the_losses_it_prints(self):
        steps, world, port = 60, 2, str(free_port())
        codes, outputs = run_all([
            ([sys.executable, "ddp_train.py", "--steps", str(steps), "--batch-size", "16", "--ptw-metrics"],
             dict(cwd=EXAMPLES, env=self.env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                                             LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                                             MASTER_PORT=port)))
            for r in range(world)])
        for r, code in enumerate(codes):
            self.assertEqual(code, 0, f"rank {r}:\n{outputs[r][-2000:]}")
        self.check_records(outputs, self.reader.records(), steps)
        self.assertRegex(outputs[0].splitlines()[-1], r"^done: 2 ranks, 60 steps")

    @unittest.skipUnless(shutil.which("mpirun") and importable("mpi4py") and importable("numpy"),
                         "no mpirun, mpi4py or numpy")
    def test_mpi_train_reports_each_rank_through_one_launcher(self):
        steps, world = 40, 2
        # mpirun merges its ranks' output in chunks that can cut lines; --output-filename keeps a
        # file per rank (OUT/1/rank.N/stdout) to compare with the records.
        out = os.path.join(self.dir.name, "out")
        # As ptw starts it: one process (mpirun) with RANK=0, which its children inherit.
        launcher = subprocess.run(
            ["mpirun", "-np", str(world), "--oversubscribe", "--output-filename", out,
             sys.executable, "mpi_train.py", "--steps", str(steps)],
            cwd=EXAMPLES, capture_output=True, text=True, timeout=120,
            env=self.env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                         OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
        self.assertEqual(launcher.returncode, 0, launcher.stdout[-2000:] + launcher.stderr[-2000:])
        outputs = []
        for rank in range(world):
            with open(os.path.join(out, "1", f"rank.{rank}", "stdout")) as f:
                outputs.append(f.read())
        self.check_records(outputs, self.reader.records(), steps)
        self.assertRegex(outputs[0].splitlines()[-1], r"^done: 2 ranks, 40 steps")


class ProfilesTest(unittest.TestCase):
    """The example profiles of the command strategy (resources/profiles/script-*.json), started as
    docs/scripts.md says ptw starts them, 40 steps each: every reporting rank reports every step."""

    NUMBER = r"([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf|NaN|Infinity))"

    def start(self, name, steps=None):
        path = name if os.path.isabs(name) else os.path.join(SOURCE, "resources", "profiles", name)
        with open(path) as f:
            profile = json.load(f)
        if steps is not None:
            profile["hyper"]["max_steps"] = steps
        command = profile["command"]

        def expand(arg):
            return re.sub(r"\{(\w+)\.(\w+)\}", lambda m: str(profile[m.group(1)][m.group(2)]), arg)

        # python3 on PATH may lack torch (a pyenv shim, say); this suite's python3 has what it needs.
        args = [sys.executable if a == "python3" else expand(a) for a in [command["program"]] + command["args"]]
        cwd = os.path.normpath(os.path.join(os.path.dirname(path), command["cwd"]))
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        reader = FifoReader(os.path.join(directory.name, "metrics"))
        world, port = profile["strategy"]["ranks"], str(free_port())
        commands = []
        for rank in range(world):
            env = {k: v for k, v in os.environ.items() if k not in ("PTW_METRICS", "OMPI_COMM_WORLD_RANK")}
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                       GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port, PYTHONUNBUFFERED="1",
                       PYTHONPATH=MODULE_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       PTW_METRICS=reader.path)
            env.update(item.split("=", 1) for item in command.get("env", []))
            commands.append((args, dict(cwd=cwd, env=env)))
        codes, outputs = run_all(commands, timeout=300)
        for rank, code in enumerate(codes):
            self.assertEqual(code, 0, f"{name} rank {rank}:\n{outputs[rank][-2000:]}")
        return profile, outputs, reader.records()

    def expect_steps(self, by_rank, ranks, steps):
        self.assertEqual(sorted(by_rank), list(range(ranks)))
        for rank, losses in by_rank.items():
            self.assertEqual(sorted(losses), list(range(1, steps + 1)), f"rank {rank}")
            self.assertLess(losses[steps], losses[1], f"rank {rank}: the loss did not fall")

    @unittest.skipUnless(importable("torch"), "python3 has no torch")
    def test_script_ddp(self):
        profile, outputs, records = self.start("script-ddp.json", 40)
        by_rank = {}
        for r in records:
            by_rank.setdefault(r["rank"], {})[r["step"]] = r["loss"]
        self.expect_steps(by_rank, profile["strategy"]["ranks"], 40)

    @unittest.skipUnless(importable("torch"), "python3 has no torch")
    def test_script_ddp_pattern(self):
        profile, outputs, records = self.start("script-ddp-pattern.json", 40)
        self.assertEqual(records, [])
        names = []
        pattern = re.compile(re.sub(r"\{([A-Za-z0-9_./-]+)\}", lambda m: names.append(m.group(1)) or self.NUMBER,
                                    profile["command"]["pattern"]))
        self.assertEqual(names, ["step", "loss"])
        by_rank = {}
        for rank, output in enumerate(outputs):
            for line in output.splitlines():
                m = pattern.search(line)
                if m:
                    by_rank.setdefault(rank, {})[int(m.group(1))] = float(m.group(2))
        self.expect_steps(by_rank, profile["strategy"]["ranks"], 40)

    @unittest.skipUnless(shutil.which("mpirun") and importable("mpi4py") and importable("numpy"),
                         "no mpirun, mpi4py or numpy")
    def test_script_mpi(self):
        profile, outputs, records = self.start("script-mpi.json", 40)
        self.assertEqual(profile["strategy"]["ranks"], 1)
        by_rank = {}
        for r in records:
            by_rank.setdefault(r["rank"], {})[r["step"]] = r["loss"]
        self.expect_steps(by_rank, profile["command"]["report_ranks"], 40)


class DocsTest(ProfilesTest):
    """docs/scripts.md's complete example (its train.py and train.json blocks), run as written."""

    test_script_ddp = test_script_ddp_pattern = test_script_mpi = None  # run by ProfilesTest

    @unittest.skipUnless(importable("torch"), "python3 has no torch")
    def test_the_complete_example(self):
        with open(os.path.join(SOURCE, "docs", "scripts.md")) as f:
            doc = f.read()
        section = doc.split("## A complete example", 1)[1].split("\n## ", 1)[0]
        blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
        self.assertEqual([kind for kind, _ in blocks], ["python", "json", "sh"])
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        for name, (_, text) in zip(("train.py", "train.json"), blocks):
            with open(os.path.join(directory.name, name), "w") as f:
                f.write(text)
        self.assertIn("--profile train.json --expect 'final.loss < 0.1'", blocks[2][1])
        profile, outputs, records = self.start(os.path.join(directory.name, "train.json"))
        steps = profile["hyper"]["max_steps"]
        by_rank = {}
        for r in records:
            by_rank.setdefault(r["rank"], {})[r["step"]] = r["loss"]
        self.expect_steps(by_rank, profile["strategy"]["ranks"], steps)
        final = sum(losses[steps] for losses in by_rank.values()) / len(by_rank)
        self.assertLess(final, 0.1)


if __name__ == "__main__":
    unittest.main()
