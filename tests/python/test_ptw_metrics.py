# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of resources/python/ptw_metrics.py, the module scripts report metrics to ptw with.

Run from this folder with the module on PYTHONPATH (CTest's ptw_metrics_py does):
    PYTHONPATH=../../resources/python /usr/bin/python3 -m unittest -v test_ptw_metrics
Each test loads the module afresh (importlib.reload) under the environment it sets, and reads
what arrives on a real FIFO.
"""

import atexit
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

import ptw_metrics

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK")


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.fifo = os.path.join(self.dir.name, "metrics")
        os.mkfifo(self.fifo)
        self.readers = []
        self.addCleanup(self.close_readers)

    def close_readers(self):
        for fd in self.readers:
            os.close(fd)

    def load(self, **env):
        """The module, reloaded with PTW_METRICS and the rank variables set to env only."""
        clean = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES + ("PTW_METRICS",)}
        clean.update(env)
        with mock.patch.dict(os.environ, clean, clear=True):
            module = importlib.reload(ptw_metrics)
        # Each reload registers its exit report; this test's drops are not the suite's to report.
        atexit.unregister(module._report)
        self.addCleanup(module._close_locked)
        return module

    def open_reader(self):
        """A reading end of the FIFO that never blocks; read it with read_records()."""
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.readers.append(fd)
        return fd

    def close_reader(self, fd):
        self.readers.remove(fd)
        os.close(fd)

    @staticmethod
    def read_lines(fd):
        data = b""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        if data:
            assert data.endswith(b"\n"), data[-80:]
        return data.decode().splitlines()

    def read_records(self, fd):
        return [json.loads(line) for line in self.read_lines(fd)]

    def test_records_arrive_exactly(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="1")
        reader = self.open_reader()
        self.assertTrue(m.active())
        m.log(1, loss=0.5, samples=64)
        m.log(2, loss=1 / 3, samples=32, accuracy=0.91, lr=0.05, epoch=0, **{"grad/norm.l2-x": 7})
        m.log(3, loss=float("nan"), val_loss=float("inf"), comm_ms=-float("inf"), skipped=None)
        m.log(4)
        m.log(5, loss=0.25, rank=7)
        m.flush()
        records = self.read_records(reader)
        self.assertEqual(records[:2], [
            {"rank": 1, "step": 1, "loss": 0.5, "samples": 64},
            {"rank": 1, "step": 2, "loss": 1 / 3, "samples": 32, "accuracy": 0.91, "lr": 0.05, "epoch": 0,
             "grad/norm.l2-x": 7},
        ])
        self.assertEqual(sorted(records[2]), ["comm_ms", "loss", "rank", "step", "val_loss"])
        self.assertTrue(math.isnan(records[2]["loss"]))
        self.assertEqual((records[2]["val_loss"], records[2]["comm_ms"]), (math.inf, -math.inf))
        self.assertEqual(records[3:], [{"rank": 1, "step": 4}, {"rank": 7, "step": 5, "loss": 0.25}])
        self.assertEqual(m.dropped(), 0)

    def test_tokens_for_non_finite_numbers(self):
        m = self.load(PTW_METRICS=self.fifo)
        reader = self.open_reader()
        m.log(0, loss=float("nan"), a=float("inf"), b=float("-inf"))
        self.assertEqual(self.read_lines(reader), ['{"step": 0, "loss": NaN, "a": Infinity, "b": -Infinity}'])

    def test_lines_are_what_json_writes(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="5")
        reader = self.open_reader()
        values = [0, -1, 2 ** 63, 10 ** 30, 0.0, -0.0, 0.1, 1 / 3, 1e16, 1e-7, 5e-324, 1.7976931348623157e308,
                  -2.5e-300, float("nan"), float("inf"), float("-inf")]
        for i, value in enumerate(values):
            m.log(i, loss=value, samples=i, x=value)
            m.log(i, a=value, rank=i)
        expected = []
        for i, value in enumerate(values):
            expected.append(json.dumps({"rank": 5, "step": i, "loss": value, "samples": i, "x": value}))
            expected.append(json.dumps({"rank": i, "step": i, "a": value}))
        m.flush()
        self.assertEqual(self.read_lines(reader), expected)

    def test_rank_from_the_environment_in_precedence_order(self):
        values = {"OMPI_COMM_WORLD_RANK": "3", "PMI_RANK": "2", "PMIX_RANK": "1", "RANK": "0"}
        for first in range(len(RANK_VARIABLES) + 1):
            env = {name: values[name] for name in RANK_VARIABLES[first:]}
            with self.subTest(set=sorted(env)):
                m = self.load(PTW_METRICS=self.fifo, **env)
                reader = self.open_reader()
                m.log(10, loss=1.0)
                expected = {"step": 10, "loss": 1.0}
                if env:
                    expected = {"rank": int(env[RANK_VARIABLES[first]]), **expected}
                self.assertEqual(self.read_records(reader), [expected])
                self.close_reader(reader)

    def test_numpy_scalars_are_numbers(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy is not installed")
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        reader = self.open_reader()
        m.log(numpy.int64(3), loss=numpy.float32(0.5), samples=numpy.int32(8), x=numpy.float64(0.1))
        m.flush()
        self.assertEqual(self.read_records(reader), [{"rank": 0, "step": 3, "loss": 0.5, "samples": 8, "x": 0.1}])

    def test_a_reader_that_never_reads_does_not_block(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        reader = self.open_reader()  # open, so the writer's open succeeds, and never read until the end
        calls = 100_000
        start = time.monotonic()
        for step in range(calls):
            m.log(step, loss=0.5, samples=64)
        m.flush()
        elapsed = time.monotonic() - start
        # A blocking write would hang on the full pipe; the bound only tells that from "returned".
        self.assertLess(elapsed, 5.0)
        records = self.read_records(reader)
        self.assertGreater(m.dropped(), 0)
        self.assertGreater(len(records), 0)
        self.assertEqual(len(records) + m.dropped(), calls)
        # What arrived is whole records, the first steps among them, in order: once the pipe is
        # full, a short batch may still fit where a long one did not.
        steps = [r["step"] for r in records]
        self.assertEqual(steps[0], 0)
        self.assertEqual(steps, sorted(set(steps)))

    def test_no_reader_drops_and_retries_the_open_once_a_second(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        now = [100.0]
        m._monotonic = lambda: now[0]
        real_open, attempts = os.open, []

        def counting_open(path, flags, *args):
            if path == self.fifo and flags & os.O_WRONLY:
                attempts.append(now[0])
            return real_open(path, flags, *args)

        with mock.patch.object(m.os, "open", counting_open):
            for step in range(10):
                m.log(step, loss=1.0)  # ENXIO: a FIFO without a reader
            m.flush()
            self.assertEqual(attempts, [100.0])
            self.assertEqual(m.dropped(), 10)
            reader = self.open_reader()
            now[0] += 0.5
            m.log(10, loss=1.0)  # too soon to try again
            now[0] += 0.6
            m.log(11, loss=1.0)
            m.log(12, loss=1.0)
            m.flush()
        self.assertEqual(attempts, [100.0, 101.1])
        self.assertEqual([r["step"] for r in self.read_records(reader)], [11, 12])
        self.assertEqual(m.dropped(), 11)

    def test_a_missing_fifo_drops_and_creates_nothing(self):
        missing = os.path.join(self.dir.name, "absent")
        m = self.load(PTW_METRICS=missing)
        for step in range(5):
            m.log(step, loss=1.0)
        m.flush()
        self.assertEqual(m.dropped(), 5)
        self.assertFalse(os.path.exists(missing))

    def test_a_reader_that_goes_away_and_comes_back(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        now = [100.0]
        m._monotonic = lambda: now[0]
        reader = self.open_reader()
        m.log(1, loss=1.0)
        self.assertEqual(self.read_records(reader), [{"rank": 0, "step": 1, "loss": 1.0}])
        self.close_reader(reader)
        now[0] += 0.05  # past FLUSH_INTERVAL_S: each record is written at once
        m.log(2, loss=1.0)  # EPIPE: dropped, and the channel closed
        now[0] += 0.05
        m.log(3, loss=1.0)  # within the second: not reopened
        self.assertEqual(m.dropped(), 2)
        reader = self.open_reader()
        now[0] += 1.5
        m.log(4, loss=1.0)
        self.assertEqual(self.read_records(reader), [{"rank": 0, "step": 4, "loss": 1.0}])
        self.assertEqual(m.dropped(), 2)

    def test_outside_ptw_nothing_is_opened(self):
        m = self.load(RANK="0")
        self.assertFalse(m.active())
        with mock.patch.object(m.os, "open", side_effect=AssertionError("opened a file")) as opened, \
                mock.patch.object(m.os, "write", side_effect=AssertionError("wrote")):
            for step in range(1000):
                m.log(step, loss=0.5, samples=64, accuracy=0.9)
        self.assertEqual(opened.call_count, 0)
        self.assertEqual(m.dropped(), 0)

    def test_lines_over_4096_bytes_are_dropped_whole(self):
        m = self.load(PTW_METRICS=self.fifo)
        reader = self.open_reader()
        base = len('{"step": 0, "pad": }\n')
        at_limit = int("1" * (4096 - base))
        m.log(0, pad=at_limit)  # exactly 4096 bytes with its newline: written
        m.log(0, pad=at_limit * 10 + 1)  # 4097 bytes: dropped
        m.log(1, **{f"scalar_{i:03d}": 0.123456789 for i in range(200)})  # 200 names: dropped
        m.log(2, loss=0.5)
        m.flush()
        lines = self.read_lines(reader)
        self.assertEqual([len(line) + 1 for line in lines], [4096, len('{"step": 2, "loss": 0.5}\n')])
        self.assertEqual(json.loads(lines[0])["pad"], at_limit)
        self.assertEqual(m.dropped(), 2)

    def test_bad_names_and_values_raise_naming_the_key(self):
        m = self.load(PTW_METRICS=self.fifo)
        reader = self.open_reader()
        rows = [
            ((1,), {"bad name": 1.0}, ValueError, "'bad name'"),
            ((1,), {"": 1.0}, ValueError, "''"),
            ((1,), {"x" * 49: 1.0}, ValueError, "x" * 49),
            ((1,), {"caf\u00e9": 1.0}, ValueError, "caf\u00e9"),
            ((1,), {"accuracy": "0.9"}, TypeError, "accuracy must be a number, got str"),
            ((1,), {"loss": True}, TypeError, "loss must be a number, got bool"),
            ((1,), {"samples": [64]}, TypeError, "samples must be a number, got list"),
            ((1,), {"z": 1j}, TypeError, "z must be a number, got complex"),
            ((1,), {"rank": 1.5}, TypeError, "rank must be an integer"),
            ((-1,), {}, ValueError, "step must be >= 0, got -1"),
            ((1.0,), {}, TypeError, "step must be an integer, got float"),
            ((True,), {}, TypeError, "step must be an integer, got bool"),
            (("1",), {}, TypeError, "step must be an integer, got str"),
        ]
        for args, kwargs, error, text in rows:
            with self.subTest(args=args, kwargs=kwargs):
                with self.assertRaises(error) as raised:
                    m.log(*args, **kwargs)
                self.assertIn(text, str(raised.exception))
        self.assertEqual(self.read_lines(reader), [])
        self.assertEqual(m.dropped(), 0)

    def test_bad_values_raise_outside_ptw_too(self):
        m = self.load()
        with self.assertRaisesRegex(TypeError, "loss must be a number"):
            m.log(1, loss="0.5")
        with self.assertRaisesRegex(ValueError, "'a b'"):
            m.log(1, **{"a b": 1})

    def test_threads_write_whole_records(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        reader = self.open_reader()
        lines = []
        done = threading.Event()

        def drain():
            while not done.is_set():
                lines.extend(self.read_lines(reader))
                time.sleep(0.001)
            lines.extend(self.read_lines(reader))

        drainer = threading.Thread(target=drain)
        drainer.start()
        threads, per_thread = 4, 2000

        def work(t):
            for step in range(per_thread):
                m.log(step, loss=float(t), thread=t, pad=0.123456789)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        m.flush()
        done.set()
        drainer.join()
        records = [json.loads(line) for line in lines]
        self.assertEqual(len(records) + m.dropped(), threads * per_thread)
        for record in records:
            self.assertEqual(record["loss"], float(record["thread"]))
        for t in range(threads):
            steps = [r["step"] for r in records if r["thread"] == t]
            self.assertEqual(steps, sorted(steps))

    def test_records_close_together_share_one_write(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        reader = self.open_reader()
        now = [100.0]
        m._monotonic = lambda: now[0]
        real_write, writes = os.write, []

        def counting_write(fd, data):
            writes.append(data.count(b"\n"))
            return real_write(fd, data)

        with mock.patch.object(m.os, "write", counting_write):
            for step, at in enumerate([100.0, 100.005, 100.010, 100.021, 100.030, 100.200]):
                now[0] = at
                m.log(step, loss=0.5)
            # The first at once; 1-2 wait for 3, 20 ms after the first write; 4 waits; 5 comes
            # late enough to go at once, and takes 4 with it.
            self.assertEqual(writes, [1, 3, 2])
            self.assertEqual(m.flush(), None)
            self.assertEqual(writes, [1, 3, 2])  # nothing waited
        self.assertEqual([r["step"] for r in self.read_records(reader)], list(range(6)))

    def test_a_batch_never_passes_4096_bytes(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        reader = self.open_reader()
        m._monotonic = lambda: 100.0  # one instant: only the size starts a new batch
        real_write, sizes = os.write, []

        def measuring_write(fd, data):
            sizes.append(len(data))
            return real_write(fd, data)

        with mock.patch.object(m.os, "write", measuring_write):
            for step in range(1000):
                m.log(step, loss=0.123456789, samples=64)
            m.flush()
        self.assertGreater(len(sizes), 10)
        self.assertLessEqual(max(sizes), 4096)
        self.assertGreater(min(sizes[1:-1]), 4096 - 64)  # full batches between the first and the rest
        self.assertEqual([r["step"] for r in self.read_records(reader)], list(range(1000)))
        self.assertEqual(m.dropped(), 0)

    def test_a_forked_child_does_not_write_the_parents_waiting_records(self):
        m = self.load(PTW_METRICS=self.fifo, RANK="0")
        reader = self.open_reader()
        m._monotonic = lambda: 100.0
        m.log(0, loss=1.0)  # written at once
        m.log(1, loss=1.0)  # waits
        pid = os.fork()
        if pid == 0:  # the child: what its flush writes would be a copy of step 1
            try:
                m.flush()
                m._report()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        m.flush()
        self.assertEqual([r["step"] for r in self.read_records(reader)], [0, 1])

    def run_child(self, code, **env):
        child_env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES + ("PTW_METRICS",)}
        child_env.update(env)
        child_env["PYTHONPATH"] = os.path.dirname(os.path.abspath(ptw_metrics.__file__))
        return subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=60)

    def test_the_exit_line_counts_dropped_records(self):
        missing = os.path.join(self.dir.name, "absent")
        code = "import ptw_metrics\nfor s in range(7): ptw_metrics.log(s, loss=1.0)\nprint('done')"
        child = self.run_child(code, PTW_METRICS=missing)
        self.assertEqual(child.returncode, 0, child.stderr)
        self.assertEqual(child.stdout, "done\n")
        self.assertEqual(child.stderr, "ptw_metrics: 7 of 7 records dropped (the reader lagged or was gone)\n")

    def test_exit_writes_the_waiting_records(self):
        reader = self.open_reader()
        code = "import ptw_metrics\nfor s in range(50): ptw_metrics.log(s, loss=1.0)"
        child = self.run_child(code, PTW_METRICS=self.fifo, RANK="0")
        self.assertEqual((child.returncode, child.stderr), (0, ""))
        self.assertEqual([r["step"] for r in self.read_records(reader)], list(range(50)))

    def test_no_exit_line_when_nothing_was_dropped(self):
        reader = self.open_reader()
        code = "import ptw_metrics\nfor s in range(3): ptw_metrics.log(s, loss=1.0, samples=2)"
        for env in ({"PTW_METRICS": self.fifo, "RANK": "2"}, {}):
            with self.subTest(env=env):
                child = self.run_child(code, **env)
                self.assertEqual((child.returncode, child.stderr), (0, ""))
        expected = [{"rank": 2, "step": s, "loss": 1.0, "samples": 2} for s in range(3)]
        self.assertEqual(self.read_records(reader), expected)

    def test_the_descriptor_is_not_inherited(self):
        m = self.load(PTW_METRICS=self.fifo)
        self.open_reader()
        m.log(0)
        self.assertGreaterEqual(m._fd, 0)
        self.assertFalse(os.get_inheritable(m._fd))


if __name__ == "__main__":
    unittest.main()
