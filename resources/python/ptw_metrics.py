# SPDX-License-Identifier: GPL-3.0-or-later
"""Report per-step metrics from your own training script to ptw.

ptw's ``command`` strategy starts your script as N processes and sets ``PTW_METRICS`` to the path of
a FIFO (named pipe) it reads. Each call to :func:`log` writes one JSON record on one line to it::

    import ptw_metrics
    for step in range(1, steps + 1):
        loss = train_step()
        ptw_metrics.log(step, loss=loss.item(), samples=len(batch), grad_norm=norm)

The record carries ``rank`` (from ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ``PMIX_RANK`` or ``RANK``,
the first set, so that ranks started by ``mpirun`` name themselves), ``step``, ``loss``, ``samples``
(what this rank processed in the step; ptw divides by the time between records for samples/s) and any
other numbers given by name: ``samples_per_s``, ``step_ms``, ``data_ms``, ``compute_ms``, ``comm_ms``,
``opt_ms``, ``lr``, ``epoch``, ``val_loss``, ``val_accuracy`` have those meanings, any other name
(1-48 characters of ``A-Z a-z 0-9 _ . / -``) is a scalar ptw charts and stores per rank. ``None``
values are left out; NaN and infinities are written as the tokens ``NaN`` and ``Infinity``.
docs/scripts.md describes the protocol, so that a script in any language can report.

Promises:

- Outside ptw (``PTW_METRICS`` unset) :func:`log` checks its arguments and does nothing else: no
  file is opened.
- It never blocks or slows the script. The FIFO is opened non-blocking on first use; while ptw is
  not reading (no reader yet, or it went away) or lags (the pipe is full), records are dropped and
  counted, and the open is retried at most once a second. Records are written in batches, each one
  ``os.write`` of at most 4096 bytes (``PIPE_BUF``), so a batch arrives whole and at once or not at
  all; a record longer than 4096 bytes is dropped. Records from several processes on one FIFO never
  interleave.
- Records arrive live. A record is written at once when the last write was 20 ms ago or more
  (``FLUSH_INTERVAL_S``); one that follows sooner waits for the next call past that, a full batch,
  :func:`flush` or the process's exit, so a script stepping faster than every 20 ms pays for one
  system call per batch rather than per step. A process killed by SIGKILL, or ended by
  ``os._exit``, loses what was waiting: at most 20 ms of records.
- A programming error raises: a bad name (``ValueError``), a value that is not a number or is a
  bool (``TypeError``), a step that is not an integer >= 0.
- At exit, what waits is written and, if any record was dropped, one line says how many, on stderr.
- It is thread-safe, and a forked child starts with a fresh lock.

Standard library only, Python 3.9 or newer. Typical cost of :func:`log`: a few microseconds.
"""

import atexit
import numbers
import os
import re
import sys
import threading
import time

__all__ = ["log", "flush", "active", "dropped"]

#: The longest line written, newline included: POSIX makes pipe writes up to PIPE_BUF atomic.
MAX_LINE_BYTES = 4096
#: The fewest seconds between two attempts to open the channel.
REOPEN_INTERVAL_S = 1.0
#: A record logged sooner than this after the last write waits to go with the next ones.
FLUSH_INTERVAL_S = 0.02

_valid_name = re.compile(r"[A-Za-z0-9_./-]{1,48}\Z").match
_float_repr = float.__repr__  # what json writes for a finite float: the shortest exact text
_int_repr = int.__repr__
_TOKENS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # json's tokens for the non-finite
_monotonic = time.monotonic  # tests replace it to step the reopen clock


def _rank_from_env():
    # mpirun's children inherit the launcher's RANK, but each has its own OMPI_COMM_WORLD_RANK.
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK"):
        value = os.environ.get(name)
        if value is not None and value.strip() != "":
            try:
                return int(value)
            except ValueError:
                return None  # not ours to judge; ptw falls back to the process's own RANK
    return None


_path = os.environ.get("PTW_METRICS") or None
_rank = _rank_from_env()
_lock = threading.Lock()
_fd = -1
_next_open = 0.0  # monotonic time before which no open is attempted
_logged = 0
_dropped = 0
_batch = []  # encoded lines not written yet, together at most MAX_LINE_BYTES
_batch_bytes = 0
_last_write = float("-inf")  # monotonic time of the last write (or attempt)
_names = {"loss", "samples"}  # names already checked, so a step's repeated names cost a lookup
_head = '{"step": ' if _rank is None else f'{{"rank": {_rank}, "step": '


def active():
    """Whether this process reports to ptw (``PTW_METRICS`` is set)."""
    return _path is not None


def dropped():
    """How many records were dropped so far (no reader, reader lagging, or longer than 4096 bytes)."""
    return _dropped


def _text(name, value):
    """The JSON text of a number, as json.dumps writes it (NaN and Infinity included)."""
    kind = type(value)
    if kind is float:
        text = _float_repr(value)
        return _TOKENS[text] if text[-1] in "nf" else text  # nan, inf, -inf
    if kind is int:  # type() is never int for a bool
        return _int_repr(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and kind.__name__ != "bool_":
        return _text(name, int(value) if isinstance(value, numbers.Integral) else float(value))  # numpy scalars
    hint = " (for a tensor, pass .item())" if hasattr(value, "item") else ""
    raise TypeError(f"ptw_metrics.log: {name} must be a number, got {kind.__name__} {value!r:.60}{hint}")


def _integer(name, value):
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"ptw_metrics.log: {name} must be an integer, got {type(value).__name__} {value!r:.60}")
    return int(value)


def _check_name(name):
    if not isinstance(name, str) or not _valid_name(name):
        raise ValueError(f"ptw_metrics.log: the name {name!r} is not 1-48 characters of A-Z a-z 0-9 _ . / -")
    _names.add(name)


def log(step, loss=None, samples=None, **scalars):
    """Report one step: ``log(12, loss=0.53, samples=64, accuracy=0.91)``.

    ``step`` is an integer >= 0; every other value is a number (int, float, or a numpy scalar; pass
    a tensor's ``.item()``) or ``None`` to leave it out. ``rank=`` overrides the rank taken from the
    environment. Returns at once, whether or not the record could be written.
    """
    global _logged, _dropped, _batch_bytes
    step = _integer("step", step)
    if step < 0:
        raise ValueError(f"ptw_metrics.log: step must be >= 0, got {step}")
    # The line is formatted here rather than by json.dumps (a third of the call's cost): names are
    # checked to need no escaping and values are int or float, written as json writes them.
    parts = [_head, _int_repr(step)]
    if loss is not None:
        parts += (', "loss": ', _text("loss", loss))
    if samples is not None:
        parts += (', "samples": ', _text("samples", samples))
    for name, value in scalars.items():
        if name not in _names:
            _check_name(name)
        if value is None:
            continue
        if name == "rank":
            parts[0] = f'{{"rank": {_integer("rank", value)}, "step": '
            continue
        parts += (', "', name, '": ', _text(name, value))
    if _path is None:
        return
    parts.append("}\n")
    line = "".join(parts).encode()
    with _lock:
        _logged += 1
        if len(line) > MAX_LINE_BYTES:
            _dropped += 1
            return
        now = _monotonic()
        if _batch_bytes + len(line) > MAX_LINE_BYTES:
            _write_batch_locked(now)
        _batch.append(line)
        _batch_bytes += len(line)
        if now - _last_write >= FLUSH_INTERVAL_S:
            _write_batch_locked(now)


def flush():
    """Write the records that wait for the next batch now (before a long pause, for instance)."""
    with _lock:
        if _batch:
            _write_batch_locked(_monotonic())


def _write_batch_locked(now):
    # Written whole or dropped whole: one write of at most PIPE_BUF bytes to a pipe is atomic.
    global _dropped, _fd, _next_open, _batch_bytes, _last_write
    data = b"".join(_batch)
    count = len(_batch)
    _batch.clear()
    _batch_bytes = 0
    _last_write = now
    fd = _fd
    if fd < 0:
        if now < _next_open:
            _dropped += count
            return
        _next_open = now + REOPEN_INTERVAL_S
        try:
            # O_APPEND: a regular file named by PTW_METRICS (a run by hand) collects every rank's lines.
            fd = _fd = os.open(_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_APPEND)
        except OSError:  # ENXIO: no reader at this moment; ENOENT: no FIFO
            _dropped += count
            return
    try:
        if os.write(fd, data) != len(data):  # only a regular file on a full disk writes part
            _dropped += count
    except BlockingIOError:  # the pipe is full: the reader lags
        _dropped += count
    except OSError:  # EPIPE: the reader went away; anything else: start over a second later
        _dropped += count
        _close_locked()


def _close_locked():
    global _fd, _next_open
    if _fd >= 0:
        try:
            os.close(_fd)
        except OSError:
            pass
        _fd = -1
        _next_open = _monotonic() + REOPEN_INTERVAL_S


def _report():
    with _lock:
        if _batch:
            _write_batch_locked(_monotonic())
        _close_locked()
        if _dropped:
            sys.stderr.write(f"ptw_metrics: {_dropped} of {_logged} records dropped (the reader lagged or was gone)\n")
            sys.stderr.flush()


def _after_fork_in_child():
    # The waiting records are the parent's to write; the child would write them twice.
    global _lock, _batch_bytes
    _lock = threading.Lock()
    _batch.clear()
    _batch_bytes = 0


atexit.register(_report)
os.register_at_fork(after_in_child=_after_fork_in_child)
