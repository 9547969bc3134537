"""Processes and devices on Keras-on-JAX: what training/distribution.py is for tf.distribute.

    num_devices = jax_num_devices(FLAGS.distribution, ...)          # before JAX starts
    start_processes(FLAGS.distribution, FLAGS.coordinator_address, ...)   # several hosts
    use_devices(num_devices)          # keras.distribution.DataParallel over them

* the drivers' strategy flags on JAX (`jax_num_devices`; `check_process_flags`: several-process
  flags that cannot work, one line naming the flag before anything starts);
* several processes (hosts) on JAX's own runtime (`start_processes`: `jax.distributed`, a
  loopback coordinator bound to loopback, one line and exit 1 when the peers do not join);
* which process writes (`is_writer`: process 0) and which rows of a global batch each feeds
  (`process_batches`, `process_rows`), variables built process-local (`process_local_variables`)
  and made global (`replicated`);
* the devices a batch is split over (`use_devices`, `num_replicas`, `check_batch_size`).

training/jax_core.py (the training core) and the fine-tuning and pre-training drivers use them.
Pure Python until called: JAX is imported inside the functions.
"""
import atexit
import contextlib
import os
import re

import numpy as np

from training.loop import TrainingError


def replicated(value, sharding):
    """`value` (the same on every process) as a global array every device of `sharding` holds
    whole, from this process's copy: no cross-process check or transfer (device_put makes one)."""
    import jax
    host = np.asarray(value)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def jax_num_devices(distribution=None, tpu=None, tpu_zone=None, gcp_project=None,
                    num_cpu_devices=None):
    """The drivers' strategy flags (training/flags.py) on Keras-on-JAX, where one host's local
    devices are all there is: the `num_devices` of `use_devices` (None: every local device, for
    `mirrored` and by default; 1 for `one_device`). `num_cpu_devices` > 1 splits the CPU into
    that many devices (XLA's host platform device count), so call it before JAX starts.
    multi_worker: every device of every process (`start_processes` joins them). What only
    TensorFlow has (TPUStrategy, --tpu) is a TrainingError of one line."""
    for flag, value in (("tpu", tpu), ("tpu_zone", tpu_zone), ("gcp_project", gcp_project),
                        ("distribution=tpu", distribution == "tpu")):
        if value:
            raise TrainingError(f"--{flag} is for TensorFlow; on JAX a TPU VM's chips are local "
                                "devices and every local device is used without it "
                                "(--distribution=one_device: the first)")
    if distribution not in (None, "", "mirrored", "one_device", "multi_worker"):
        raise TrainingError(f"unknown --distribution {distribution!r}; on JAX: one_device, "
                            "mirrored (every local device, the default) or multi_worker (several "
                            "processes: start_processes)")
    if num_cpu_devices and num_cpu_devices > 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_"
                                   f"platform_device_count={int(num_cpu_devices)}").strip()
    return 1 if distribution == "one_device" else None


DEFAULT_DISTRIBUTED_TIMEOUT = 300   # seconds: every process of a pod slice starting up
# Seconds without a heartbeat before JAX's coordinator counts a process as lost (JAX's default is
# 100): the bound on how long the others wait, in a collective, for one that was killed.
DEFAULT_PEER_TIMEOUT = 60


def check_process_flags(distribution=None, coordinator_address=None, num_processes=None,
                        process_id=None, timeout=None, peer_timeout=None):
    """The several-process flags (training/flags.py) checked before anything starts: no data
    read, no process joined, nothing written. A TrainingError of one line naming the flag for
    what cannot work: a --coordinator_address without a host or a port (1..65535), an IPv6 host
    without brackets, --num_processes < 1, a --process_id outside 0 .. num_processes - 1,
    --distributed_timeout or --peer_timeout < 1, or --distribution=one_device with several
    processes. Returns whether several processes are asked for (`start_processes` joins them).
    Pure Python: both drivers call it first, and `start_processes` again."""
    several = (distribution == "multi_worker" or coordinator_address is not None
               or num_processes is not None or process_id is not None)
    if not several:
        return False
    if distribution == "one_device":
        raise TrainingError("--distribution=one_device and several processes "
                            "(--coordinator_address ...) do not go together")
    if num_processes is not None and num_processes < 1:
        raise TrainingError(f"--num_processes must be >= 1, got {num_processes}")
    if process_id is not None and process_id < 0:
        raise TrainingError(f"--process_id must be >= 0, got {process_id}")
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        raise TrainingError(f"--process_id {process_id} is outside 0..{num_processes - 1} "
                            f"(--num_processes={num_processes}: processes are numbered from 0)")
    if coordinator_address is not None:
        _check_coordinator_address(coordinator_address)
    if timeout is not None and int(timeout) < 1:
        raise TrainingError(f"--distributed_timeout must be >= 1 second, got {int(timeout)}")
    if peer_timeout is not None and int(peer_timeout) < 1:
        raise TrainingError(f"--peer_timeout must be >= 1 second, got {int(peer_timeout)}")
    return True


def _check_coordinator_address(address):
    """host:port of process 0 (an IPv6 host in brackets: [::1]:1234), else a TrainingError."""
    text = str(address)
    example = "host:port of process 0, e.g. 10.0.0.1:1234 (any free port)"
    host, colon, port = text.rpartition(":")
    if not colon:
        raise TrainingError(f"--coordinator_address {text!r}: no port; give {example}")
    if not host.strip():
        raise TrainingError(f"--coordinator_address {text!r}: no host; give {example}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise TrainingError(f"--coordinator_address {text!r}: an IPv6 host goes in brackets "
                            f"([::1]:1234), or the port is missing; give {example}")
    if not port.lstrip("+-").isdigit():
        raise TrainingError(f"--coordinator_address {text!r}: port {port!r} is not a number; "
                            f"give {example}")
    if not 1 <= int(port) <= 65535:
        raise TrainingError(f"--coordinator_address {text!r}: port {int(port)} is outside "
                            f"1..65535; give {example}")


def _waiting_line(coordinator_address, num_processes, process_id, timeout):
    """What a process says once before it waits in `jax.distributed.initialize`."""
    if not coordinator_address:
        return (f"waiting for every process to join the coordinator found in the environment "
                f"(timeout {timeout}s)")
    if process_id == 0 and num_processes:
        others = num_processes - 1
        if not others:
            return f"starting the coordinator at {coordinator_address} (1 process)"
        return (f"waiting for {others} more process{'es' if others > 1 else ''} at "
                f"{coordinator_address} (timeout {timeout}s)")
    who = "this process" if process_id is None else f"process {process_id}"
    of = f" of {num_processes}" if num_processes else ""
    return (f"{who}{of}: waiting for the coordinator at {coordinator_address} and the other "
            f"processes (timeout {timeout}s)")


def start_processes(distribution=None, coordinator_address=None, num_processes=None,
                    process_id=None, timeout=None, log=print, peer_timeout=None,
                    checkpoints=True):
    """Several processes (hosts) on JAX's own runtime: `jax.distributed.initialize` from the
    flags, or, with --distribution=multi_worker alone, from the environment (JAX's detection:
    TPU pod slices, SLURM, Open MPI). Call it before any JAX computation (after
    `jax_num_devices`). Returns (process index, process count); (0, 1) where neither asks for
    several processes. Then `use_devices` spans every process's devices; each process feeds its
    rows of the global batch (`process_batches`) and process 0 writes the outputs.

    A coordinator that does not answer, or processes that do not all join within `timeout`
    seconds: one line `error: ...` on stderr and exit status 1, from a timer of ours (JAX
    itself aborts the process with a C++ stack trace at its own deadline, set a little later).
    Flags that cannot work (`check_process_flags`, which the drivers call first) and what JAX
    finds inconsistent (no cluster found): TrainingError. Before it blocks it says once what it
    waits for, with the address (`log`).

    A process that stops sending heartbeats for `peer_timeout` seconds (killed, its host lost)
    counts as lost to JAX's coordinator, which then ends the others (JAX's own lines) rather than
    leaving them waiting in a collective; a SIGTERM stops all of them at one step instead
    (`agreed_stop`). On the CPU the processes' collectives are connected before it returns, gloo's
    lines about it kept off the console (`_connect_collectives`); a process lost meanwhile is
    `lost_peer_as_error`'s line, whose advice follows `checkpoints` (whether the run writes
    them: fine-tuning does not)."""
    if not check_process_flags(distribution, coordinator_address, num_processes, process_id,
                               timeout, peer_timeout):
        return 0, 1
    timeout = DEFAULT_DISTRIBUTED_TIMEOUT if timeout is None else int(timeout)
    peer_timeout = DEFAULT_PEER_TIMEOUT if peer_timeout is None else int(peer_timeout)
    import logging
    import threading
    import jax
    # JAX's "Connecting to ..." INFO lines: the driver says where it joined itself.
    logging.getLogger("jax._src.distributed").setLevel(logging.WARNING)
    # JAX's CPU client needs an implementation of cross-process collectives: gloo ships with
    # jaxlib (JAX 0.10's default; older releases had none). Another one chosen (mpi) stays.
    # GPU and TPU have their own.
    if not jax.config.values.get("jax_cpu_collectives_implementation"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    where = coordinator_address or "the coordinator found in the environment"
    # Said once, before blocking: a process waiting for its peers is not a hung one.
    log(_waiting_line(coordinator_address, num_processes, process_id, timeout))
    timer = threading.Timer(timeout, _joining_timed_out,
                            (coordinator_address, num_processes, process_id, timeout))
    timer.daemon = True
    timer.start()
    # JAX's coordinator listens on every interface ([::]:port) unless told otherwise: a loopback
    # coordinator (the tests) listens on loopback only.
    host = (coordinator_address or "").rpartition(":")[0].strip("[]")
    bind = coordinator_address if host in ("127.0.0.1", "localhost", "::1") else None
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                   initialization_timeout=timeout + 30,
                                   coordinator_bind_address=bind,
                                   heartbeat_timeout_seconds=peer_timeout)
    except (ValueError, TypeError, RuntimeError) as e:
        raise TrainingError(f"several processes: {str(e).splitlines()[0]} (pass "
                            "--coordinator_address, --num_processes and --process_id, or run "
                            "in a TPU pod slice / SLURM / Open MPI job)") from None
    finally:
        timer.cancel()
    _connect_collectives(jax, checkpoints)
    log(f"JAX distributed: process {jax.process_index()} of {jax.process_count()} ({where})")
    return jax.process_index(), jax.process_count()


def by_process(devices):
    """Every process's devices, process by process (`use_devices`' order)."""
    return sorted(devices, key=lambda d: (d.process_index, d.id))


def _connect_collectives(jax, checkpoints=True):
    """On the CPU, the processes' collectives (gloo) connected now, gloo's lines kept off the
    console: gloo prints `[Gloo] Rank r is connected to n peer ranks. Expected number of
    connected peer ranks is : n` on stdout for each device of a set of devices the first time
    that set makes a collective across processes, which a run would do in its first steps. The
    sets a run uses: one device of each process (multihost_utils' `process_allgather`,
    `agreed_stop`), and every device in `use_devices`' order (DataParallel's sums). A program
    over another set prints gloo's lines when it first runs. A line where fewer peers are
    connected than expected shows (base/command.py GLOO_CONNECTED)."""
    if jax.process_count() < 2 or jax.devices()[0].platform != "cpu":
        return
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from base.command import GLOO_CONNECTED, kept_off_console
    count = jax.process_count()
    meshes = (  # multihost_utils' mesh (its collectives span "processes"), DataParallel's
        (Mesh(np.array(jax.devices()).reshape(count, -1), ("processes", "local")), "processes"),
        (Mesh(np.array(by_process(jax.devices())), ("devices",)), "devices"))
    with kept_off_console(1, GLOO_CONNECTED), lost_peer_as_error(checkpoints=checkpoints):
        for mesh, axis in meshes:
            rows = jax.make_array_from_process_local_data(
                NamedSharding(mesh, PartitionSpec(axis)),
                np.zeros(mesh.shape[axis] // count, np.int32))
            # Every local device's part awaited: each device connects its own.
            jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(
                rows).block_until_ready()


def _coordinator_answers(address):
    """Whether something accepts a TCP connection at host:port."""
    import socket
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def _joining_timed_out(coordinator_address, num_processes, process_id, timeout):
    """`start_processes`' timer: the one-line error and exit 1, before JAX's own abort. It runs
    in a thread while the main one waits in JAX (which releases the GIL), so it exits the
    process itself."""
    import sys
    if process_id != 0 and coordinator_address and not _coordinator_answers(coordinator_address):
        message = (f"the coordinator {coordinator_address} did not answer within {timeout}s "
                   "(is process 0 running there? --distributed_timeout)")
    else:
        message = (f"not all {num_processes or 'the'} processes joined the coordinator "
                   f"{coordinator_address or ''} within {timeout}s (each started with its own "
                   "--process_id? --distributed_timeout)").replace("  ", " ")
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(1)


def is_writer():
    """Whether this process writes the run's files (checkpoints, exports, summaries,
    TensorBoard): process 0 of several, the one process otherwise. The others read them."""
    import jax
    return jax.process_index() == 0


# What a collective's error says when another process is gone: gloo's connection to it closed
# (CPU), or the coordinator stopped hearing from it (its heartbeat timeout).
_PEER_LOST = re.compile(r"closed by peer|reset by peer|Gloo \w+ failed|heartbeat timeout",
                        re.IGNORECASE)
_lost = []          # non-empty once a peer was found lost: the exit skips JAX's shutdown


class PeerLost(TrainingError):
    """Another process of the run is gone (`peer_lost`): this one stops too, exit status 1."""


@contextlib.contextmanager
def lost_peer_as_error(active=True, checkpoints=True):
    """Around calls every process makes: an error saying another process is gone becomes
    `peer_lost`'s one-line PeerLost (where `active`; `checkpoints`: whether the run writes
    checkpoints, which the line's advice follows); any other error propagates, and so does a
    PeerLost from an inner one (a core's calls inside a fine-tuning run's), unchanged."""
    try:
        yield
    except PeerLost:
        raise
    except Exception as e:  # noqa: BLE001 -- a lost process is one line, the rest propagate
        lost = peer_lost(e, checkpoints) if active else None
        if lost is None:
            raise
        raise lost from None


def peer_lost(error, checkpoints=True):
    """A PeerLost (a TrainingError) of one line for `error`, raised by a call every process
    makes, when it says another process is gone; else None. The line names the lost process
    where it can be only one (two processes: the other one; with more, gloo's error does not say
    which). The rerun it advises: every process, resuming from process 0's last checkpoint, or,
    for a run without `checkpoints` (fine-tuning), starting it again. Once said, this process's
    exit skips JAX's shutdown barrier, which would wait for the lost process and then abort
    with a C++ stack trace."""
    text = str(error).strip()
    if not _PEER_LOST.search(text):
        return None
    if not _lost:
        _lost.append(True)
        atexit.register(_exit_without_shutdown)     # runs before JAX's own exit handler
    first = " ".join(text.splitlines()[0].split())[:160]
    rerun = ("they resume from the last checkpoint process 0 wrote" if checkpoints else
             "this run writes no checkpoints, so it starts again")
    return PeerLost(f"another process was lost (killed, or its host gone): a call with "
                    f"{_the_others()} failed ({first}); this one stops too. Rerun every "
                    f"process: {rerun}")


def _the_others():
    """Who a failed call was with: `process 1 of 2` (the other one of two), else `the other
    processes`."""
    try:
        import jax
        index, count = jax.process_index(), jax.process_count()
    except Exception:  # noqa: BLE001 -- the line is said whatever JAX can still tell
        return "the other processes"
    return f"process {1 - index} of 2" if count == 2 else "the other processes"


def _exit_without_shutdown():
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def agreed_stop(received, checkpoints=True):
    """The stop every process takes after a call, given the signal this one received (None:
    none): the first process's signal among those signalled, or None. A collective that every
    process makes after every call (training/loop.py `agree_stop`), so a SIGTERM to one process
    stops all of them at the same step, where process 0 writes the checkpoint, instead of
    leaving the others waiting in their next call for one that has gone. `checkpoints`: whether
    the run writes checkpoints (`lost_peer_as_error`'s line when another process is gone)."""
    from jax.experimental import multihost_utils
    with lost_peer_as_error(checkpoints=checkpoints):
        signals = np.ravel(multihost_utils.process_allgather(np.int32(received or 0)))
    signalled = [int(x) for x in signals if x]
    return signalled[0] if signalled else None


def process_batches(task, skip_batches):
    """This process's rows of the task's global batches: all of them with one process. With
    several, the task's own share where it reads one (`host_batches(skip, process=(index,
    count))`: pre-training reads its share of the files), else the global batches, every
    process reading them whole, cut to its rows (the rows of its devices: process p holds rows
    p*B/P .. (p+1)*B/P - 1, `jax.devices()` listing process 0's first)."""
    import jax
    index, count = jax.process_index(), jax.process_count()
    if count == 1:
        return task.host_batches(skip_batches)
    import inspect
    # A subclass that overrides host_batches without `process` (reproduce/gpu_stages.py's
    # arrays) gets the fallback below.
    if "process" in inspect.signature(task.host_batches).parameters:
        return task.host_batches(skip_batches, process=(index, count))
    return _rows_of(task.host_batches(skip_batches), index, count)


def process_rows(batch, index=None, count=None):
    """This process's rows of a global batch (any pytree of [B, ...] arrays): process p of P
    holds rows p*B/P .. (p+1)*B/P - 1, what `to_device` takes as its part of the global array.
    The whole batch with one process. index, count: default jax's process index and count."""
    import jax
    if index is None:
        index, count = jax.process_index(), jax.process_count()
    if count == 1:
        return batch
    return jax.tree_util.tree_map(
        lambda v: v[index * (len(v) // count):(index + 1) * (len(v) // count)], batch)


def _rows_of(batches, index, count):
    try:
        for batch in batches:
            yield process_rows(batch, index, count)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


class process_local_variables:
    """A context in which Keras variables are built on this process alone where there are several
    (every process builds the same values from the same seed; `JaxTrainingCore.train_state`
    makes them global arrays in one go): built under the global DataParallel, each variable's
    device_put would check across the processes that its value is the same on all (a collective
    per variable: seconds). With one process the distribution stays."""

    def __enter__(self):
        import jax
        import keras
        self.distribution = keras.distribution.distribution()
        if jax.process_count() > 1:
            keras.distribution.set_distribution(None)
        return self

    def __exit__(self, *exc):
        import keras
        keras.distribution.set_distribution(self.distribution)
        return False


def num_replicas():
    """How many devices a batch is split over: the current DataParallel's, else 1."""
    import keras
    distribution = keras.distribution.distribution()
    if isinstance(distribution, keras.distribution.DataParallel):
        return int(distribution.device_mesh.devices.size)
    return 1


def check_batch_size(batch_size, name="train_batch_size"):
    """TrainingError (one line) where the devices of the current distribution do not divide
    `batch_size`, the global batch."""
    replicas = num_replicas()
    if int(batch_size) % replicas:
        raise TrainingError(f"{name} {batch_size} is not divisible by the {replicas} devices")


def use_devices(num_devices=None, log=print):
    """DataParallel over the first `num_devices` local devices (all by default); their number."""
    import jax
    import keras
    devices = jax.devices()
    processes = jax.process_count()
    if processes > 1:
        # Every process's devices, process by process: process p's rows of the global batch
        # are then the p-th contiguous part (`process_batches`, pre-training's input shares).
        devices = by_process(devices)
    if num_devices and processes > 1:
        raise TrainingError(f"--distribution=one_device with {processes} processes: several "
                            "processes use every device of every process")
    if num_devices:
        if num_devices > len(devices):
            raise TrainingError(f"{num_devices} devices asked for, {len(devices)} present")
        devices = devices[:num_devices]
    # One device: no distribution (also where an earlier call of this process set one).
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices) if len(devices) > 1 else None)
    log(f"JAX: {len(devices)} {devices[0].platform} device(s)"
        + (f" over {processes} processes" if processes > 1 else "")
        + (" (DataParallel)" if len(devices) > 1 else ""))
    return len(devices)
