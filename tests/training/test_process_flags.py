"""The several-process flags on Keras-on-JAX (training/jax_distribution.py `check_process_flags`,
`start_processes`): what cannot work is one line naming the flag before anything starts, and a
process that waits for its peers says so once, with the address, before it blocks.

In process, without joining anything: `jax.distributed.initialize` is replaced by a recorder.
The drivers' side (one line, exit status 1, nothing written) is in tests/test_bad_inputs.py
(the `flags_coordinator_*`, `flags_num_processes_*` and `flags_process_id_*` cases)."""
import re

import pytest

from training.jax_distribution import check_process_flags, start_processes
from training.loop import TrainingError


@pytest.mark.parametrize("flags, message", [
    ({"coordinator_address": "localhost"}, "--coordinator_address 'localhost': no port"),
    ({"coordinator_address": ""}, "--coordinator_address '': no port"),
    ({"coordinator_address": ":1234"}, "--coordinator_address ':1234': no host"),
    ({"coordinator_address": "10.0.0.1:"}, "port '' is not a number"),
    ({"coordinator_address": "host:http"}, "port 'http' is not a number"),
    ({"coordinator_address": "host:-1"}, "port -1 is outside 1..65535"),
    ({"coordinator_address": "host:65536"}, "port 65536 is outside 1..65535"),
    ({"coordinator_address": "host:0"}, "port 0 is outside 1..65535"),
    ({"coordinator_address": "::1:1234"}, "an IPv6 host goes in brackets"),
    ({"num_processes": 0}, "--num_processes must be >= 1, got 0"),
    ({"num_processes": -3, "process_id": 0}, "--num_processes must be >= 1, got -3"),
    ({"process_id": -1}, "--process_id must be >= 0, got -1"),
    ({"num_processes": 2, "process_id": 2}, "--process_id 2 is outside 0..1 (--num_processes=2"),
    ({"coordinator_address": "h:1", "timeout": 0}, "--distributed_timeout must be >= 1 second"),
    ({"coordinator_address": "h:1", "peer_timeout": 0}, "--peer_timeout must be >= 1 second"),
    ({"distribution": "one_device", "num_processes": 2}, "one_device and several processes"),
])
def test_flags_that_cannot_work_are_one_line_naming_the_flag(flags, message):
    with pytest.raises(TrainingError) as e:
        check_process_flags(**flags)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_flags_that_can_work_pass():
    assert check_process_flags() is False and check_process_flags("mirrored") is False
    assert check_process_flags("multi_worker") is True      # the environment's cluster
    for address in ("127.0.0.1:1", "localhost:65535", "host-0.example.com:8476",
                    "[::1]:1234", "[fe80::1]:80"):
        assert check_process_flags(None, address, 2, 1, 5) is True
    assert check_process_flags(num_processes=1, process_id=0) is True


@pytest.mark.parametrize("process_id, num_processes, expected", [
    (0, 2, "waiting for 1 more process at 127.0.0.1:4321 (timeout 7s)"),
    (0, 3, "waiting for 2 more processes at 127.0.0.1:4321 (timeout 7s)"),
    (1, 2, "process 1 of 2: waiting for the coordinator at 127.0.0.1:4321 and the other "
           "processes (timeout 7s)"),
])
def test_a_waiting_process_says_so_once_before_blocking(monkeypatch, process_id, num_processes,
                                                        expected):
    import jax
    said, calls = [], []

    def initialize(address, count, index, **kwargs):   # where JAX would block
        calls.append((address, count, index, list(said)))
        raise RuntimeError("not joined in this test")

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    monkeypatch.setattr(jax.config, "update", lambda *args: None)   # keep the CPU client as is
    with pytest.raises(TrainingError, match="not joined in this test"):
        start_processes(None, "127.0.0.1:4321", num_processes, process_id, 7, log=said.append)
    assert calls == [("127.0.0.1:4321", num_processes, process_id, [expected])]
    assert said == [expected]


def test_bad_flags_never_reach_jax(monkeypatch):
    import jax
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: pytest.fail("joined"))
    said = []
    with pytest.raises(TrainingError, match=re.escape("--coordinator_address 'localhost': no "
                                                      "port")):
        start_processes(None, "localhost", 2, 1, 7, log=said.append)
    assert said == []


def test_a_lost_process_is_one_line_naming_it(monkeypatch):
    """`lost_peer_as_error`: gloo's error of a call with a lost process becomes one PeerLost line
    naming it (of two), whose rerun advice follows whether the run writes checkpoints; an outer
    wrapper (fine-tuning's, around the core's) passes it on unchanged; other errors, and any
    where inactive, propagate as they are."""
    import jax
    from training import jax_distribution
    from training.jax_distribution import PeerLost, lost_peer_as_error
    monkeypatch.setattr(jax_distribution, "_lost", [True])   # no exit hook in the test process
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    gloo = RuntimeError("UNKNOWN: Gloo AllGather failed: [pair.cc:538] Read error "
                        "[127.0.0.1]:1234: Connection reset by peer\nsecond line")
    with pytest.raises(PeerLost) as lost:
        with lost_peer_as_error(checkpoints=True):         # fine-tuning's, around the core's
            with lost_peer_as_error(checkpoints=False):
                raise gloo
    assert str(lost.value) == (
        "another process was lost (killed, or its host gone): a call with process 0 of 2 failed "
        "(UNKNOWN: Gloo AllGather failed: [pair.cc:538] Read error [127.0.0.1]:1234: Connection "
        "reset by peer); this one stops too. Rerun every process: this run writes no "
        "checkpoints, so it starts again")
    monkeypatch.setattr(jax, "process_count", lambda: 3)
    with pytest.raises(PeerLost, match="a call with the other processes failed .*; this one "
                                       "stops too. Rerun every process: they resume from the "
                                       "last checkpoint process 0 wrote$"):
        with lost_peer_as_error():
            raise gloo
    for active, error in ((True, ValueError("bad shape")), (False, gloo)):
        with pytest.raises(type(error)) as raised:
            with lost_peer_as_error(active):
                raise error
        assert raised.value is error
