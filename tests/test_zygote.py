"""The tests' zygote (tests/zygote.py) runs a Python subprocess as a fresh interpreter would:
the same argv, cwd, environment, sys.path[0], output, exit status (codes, tracebacks, signals),
nested launches and timeouts; and it leaves to a fresh interpreter what it cannot mimic."""
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from tests import zygote
from tests.conftest import REPO_ROOT

PROGRAM = textwrap.dedent("""
    import atexit, os, signal, subprocess, sys, time
    atexit.register(lambda: print("atexit ran", flush=True))
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "X", os.environ.get("X"), "path0", sys.path[0])
    print("to stderr", file=sys.stderr)
    what = sys.argv[1]
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif what == "sleep":
        time.sleep(60)
    elif what == "raise":
        raise ValueError("boom")
    elif what == "message":
        sys.exit("a message")
    elif what == "nested":
        inner = subprocess.run([sys.executable, __file__, "7"], capture_output=True, text=True)
        print("nested", inner.returncode, inner.stdout.splitlines()[0])
    elif what == "stdin":
        print("read", sys.stdin.read().strip())
    sys.exit(int(what) if what.isdigit() else 0)
""")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("zygote") / "program.py"
    path.write_text(PROGRAM)
    return path


def _both(args, program, **kwargs):
    """(zygote's result, a fresh interpreter's result) of the same command."""
    env = dict(os.environ, X="x-value", PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, str(program), *args]
    results = []
    for switch in ("1", "0"):
        results.append(subprocess.run(cmd, env=dict(env, CONVBERT_TEST_ZYGOTE=switch),
                                      cwd=str(program.parent.parent), capture_output=True,
                                      text=True, timeout=120, **kwargs))
    return results


@pytest.mark.skipif(not isinstance(subprocess.Popen, type) or
                    not issubclass(subprocess.Popen, zygote.ZygotePopen),
                    reason="the zygote is off (CONVBERT_TEST_ZYGOTE=0)")
@pytest.mark.parametrize("args", [["3"], ["raise"], ["message"], ["kill"], ["nested"]])
def test_a_fork_behaves_as_a_fresh_interpreter(program, args):
    forked, fresh = _both(args, program)
    assert forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout
    if args == ["raise"]:     # the traceback's last line; its frames differ (runpy's)
        assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == \
            "ValueError: boom"
    else:
        assert forked.stderr == fresh.stderr
    if args == ["kill"]:
        assert forked.returncode == -signal.SIGKILL
    else:
        assert "atexit ran" in forked.stdout
    if args == ["nested"]:
        assert "nested 7 argv ['7']" in forked.stdout


def test_input_timeout_and_kill(program):
    proc = subprocess.run([sys.executable, str(program), "stdin"], input="some input\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "read some input" in proc.stdout
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, str(program), "sleep"], capture_output=True, timeout=3)
    p = subprocess.Popen([sys.executable, str(program), "sleep"], stdout=subprocess.PIPE)
    assert p.stdout.readline().startswith(b"argv")
    assert p.poll() is None
    p.terminate()
    assert p.wait(timeout=60) == -signal.SIGTERM
    p.stdout.close()


def test_what_a_fork_cannot_mimic_goes_to_a_fresh_interpreter(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    where = str(tmp_path)
    no_tf = "import sys; sys.modules['tensorflow'] = None"
    assert zygote._parse([sys.executable, "-c", no_tf], env, where) is None   # TF backend
    assert zygote._parse([sys.executable, "-c", no_tf], dict(env, KERAS_BACKEND="jax"),
                         where)[4] is True     # a zygote that blocked TensorFlow itself
    assert zygote._parse([sys.executable, "-c", "assert 'tensorflow' not in sys.modules"],
                         env, where) is None
    assert zygote._parse([sys.executable, "-X", "dev", "-c", "pass"], env, where) is None
    assert zygote._parse(["python2", "-c", "pass"], env, where) is None
    # another checkout's code: neither on PYTHONPATH nor beside the script
    assert zygote._parse([sys.executable, "-c", "pass"], {}, where) is None
    assert zygote._parse([sys.executable, "-u", "-m", "run_x", "--a"], env, where) == \
        ("-m", "run_x", ["-m", "--a"], True, False)
    # the settings read at import pick the zygote; PYTHONPATH is compared as resolved paths
    key = zygote._import_key(dict(env, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1"), where)
    assert ("KERAS_BACKEND", "jax") in key and "PYTHONUNBUFFERED" not in dict(key)
    doubled = dict(env, PYTHONPATH=os.pathsep.join([str(REPO_ROOT)] * 2))
    assert zygote._import_key(doubled, where) == zygote._import_key(env, where)


def test_a_program_that_blocks_tensorflow_on_jax_forks_a_zygote_that_blocked_it(monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.setattr(zygote, "MAX_ZYGOTES", 99)   # whatever this worker has started before
    code = textwrap.dedent("""
        import sys
        print("preloaded", "jax" in sys.modules)
        sys.modules["tensorflow"] = None
        import keras
        try:
            import tensorflow
        except ImportError:
            print("blocked", keras.backend.backend())
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    forked, fresh = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    env=dict(env, CONVBERT_TEST_ZYGOTE=switch), timeout=300)
                     for switch in ("1", "0"))
    assert fresh.stdout == "preloaded False\nblocked jax\n", fresh.stderr[-2000:]
    assert forked.stdout == "preloaded True\nblocked jax\n", forked.stderr[-2000:]


def test_a_shell_scripts_python_is_a_fork_too(program, monkeypatch):
    """tests/zygote_python as a script's $PYTHON: the exit status, output and a signal's death
    that bash sees are a fresh interpreter's."""
    monkeypatch.setattr(zygote, "MAX_ZYGOTES", 99)   # whatever this worker has started before
    env = dict(os.environ, X="x-value", PYTHONPATH=str(REPO_ROOT))
    python = zygote.script_python(env)
    if python == sys.executable:
        pytest.skip("the zygote is off (CONVBERT_TEST_ZYGOTE=0)")
    assert python == zygote.LAUNCHER
    script = '"$PYTHON" "$0" "$1"; echo "status $?"'
    results = []
    for python_of_script in (python, sys.executable):
        results.append([subprocess.run(["bash", "-c", script, str(program), arg], text=True,
                                       env=dict(env, PYTHON=python_of_script),
                                       cwd=str(program.parent), capture_output=True, timeout=120)
                        for arg in ("3", "kill", "nested")])
    def pid_free(text):   # bash names the killed process by its pid
        return re.sub(r"\d+ Killed", "Killed", text)

    for forked, fresh in zip(*results):
        assert forked.stdout == fresh.stdout and pid_free(forked.stderr) == pid_free(fresh.stderr)
    assert results[0][0].stdout.endswith("status 3\n")
    assert results[0][1].stdout.endswith(f"status {128 + signal.SIGKILL}\n")


def test_graph_optimizer_setting_reaches_forks_only():
    """A fork's TensorFlow has the run's grappler setting (scripts/test_env.sh sets
    CONVBERT_TEST_GRAPPLER=0: off); a fresh interpreter has TensorFlow's default (on), as users."""
    code = ("import tensorflow as tf; "
            "print(bool(tf.config.optimizer.get_experimental_options().get('disable_meta_optimizer')))")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("KERAS_BACKEND", None)
    off = os.environ.get(zygote.GRAPPLER_ENV) == "0" and subprocess.Popen is zygote.ZygotePopen
    for switch, shown in (("1", off), ("0", False)):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300, env=dict(env, CONVBERT_TEST_ZYGOTE=switch))
        assert done.stdout.split() == [str(shown)], (switch, done.stderr[-2000:])


@pytest.mark.skipif(not isinstance(subprocess.Popen, type) or
                    not issubclass(subprocess.Popen, zygote.ZygotePopen),
                    reason="the zygote is off (CONVBERT_TEST_ZYGOTE=0)")
def test_cpu_log_records_each_fork_and_the_map_sums_them(program, tmp_path, capsys):
    """$CONVBERT_TEST_CPU_LOG: a fork's CPU line, written by its monitor, names the test that
    started it and the program; tests/cpu_map.py sums such lines per file and per tool."""
    import json
    from tests import cpu_map
    log = tmp_path / "cpu.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CONVBERT_TEST_CPU_LOG=str(log))
    done = subprocess.run([sys.executable, str(program), "3"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3
    (fork,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert fork["kind"] == "fork" and fork["argv"][:2] == [str(program), "3"]
    assert fork["program"] == str(program)
    assert fork["test"] == os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    assert fork["cpu"] >= 0 and fork["wall"] > 0
    with log.open("a") as f:
        f.write(json.dumps({"kind": "test", "test": fork["test"], "self": 1.5, "children": 0.5,
                            "wall": 4.0}) + "\n")
    assert cpu_map.main([str(log)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.endswith("  tests/test_zygote.py"))
    assert [float(x) for x in row.split()[1:3]] == [1.5, 0.5]
    assert float(row.split()[4]) == 4.0
    assert any(line.split()[1:] == ["1", "program.py"] for line in out.splitlines())
