"""The prepared GPU run on the CPU (docs/GPU.md): `bash scripts/gpu_bundle.sh` builds the bundle
from ../shared (<= 60 MiB; for this Python, its wheels packed from this environment: no test
reaches the package index); `bash scripts/gpu_run.sh --rehearse` runs the GPU window's two calls
on a tiny model with the real plan's structure (25-step blocks, planned steps, seed 1 in call 1
and seeds 2-3 in call 2, task-major fine-tuning, the compile cache archived and carried), the
bundle's wheels installed into an empty folder, `tensorflow` unimportable, and fails on any
program compiled after the compile stage, any missing cell or misreported step count. Beside it:
the plan at the recorded GPU rates, the block size for every planned length, a budget cut, the
schedule, the report's lines."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO_ROOT, shared_path
from tests.zygote import script_python

PYTHON = "%d.%d" % sys.version_info[:2]


# What a wheel's .dist-info holds once installed that the wheel itself does not.
_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}


def installed_wheel(name, directory):
    """This environment's installed distribution `name` packed back into a wheel in `directory`
    (its files and metadata, a fresh RECORD): the bundle's wheels without the package index."""
    import base64
    import hashlib
    import zipfile
    from importlib import metadata
    dist = metadata.distribution(name)
    tag = next(line.split(":", 1)[1].strip() for line in dist.read_text("WHEEL").splitlines()
               if line.startswith("Tag:"))
    path = directory / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tag}.whl"
    record, info = [], None
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for f in dist.files:
            if f.parts[0] == ".." or "__pycache__" in f.parts:      # scripts, byte code
                continue
            if f.parts[0].endswith(".dist-info"):
                info = f.parts[0]
                if f.name in _INSTALLER_FILES:
                    continue
            data = f.locate().read_bytes()
            whl.writestr(str(f), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{f},sha256={digest.decode()},{len(data)}")
        whl.writestr(f"{info}/RECORD", "\n".join(record + [f"{info}/RECORD,,"]) + "\n")
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The bundle for this Python, its wheels packed from this environment (no test reaches the
    package index: scripts/gpu_bundle.sh --wheels_from)."""
    pytest.importorskip("jax")
    from reproduce.gpu_bundle import WHEELS
    shared = shared_path("data").parent
    root = tmp_path_factory.mktemp("gpu")
    out = root / "bundle"
    wheels = root / "installed_wheels"
    wheels.mkdir()
    for name in WHEELS:
        installed_wheel(name, wheels)
    env = dict(os.environ)
    env["PYTHON"] = script_python(env)     # its Python and the builders it runs: zygote forks
    done = subprocess.run(["bash", "scripts/gpu_bundle.sh", f"--output_dir={out}",
                           f"--build_dir={root / 'build'}", f"--shared_dir={shared}",
                           f"--python_version={PYTHON}", f"--wheels_from={wheels}",
                           # in the builder's process: no TensorFlow import per worker (the
                           # two-process build: tests/data/test_pretraining_builder.py)
                           "--build_processes=1"],
                          cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=1200,
                          env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return root, out, done.stdout


def test_bundle_is_small_and_complete(bundle):
    _, out, stdout = bundle
    info = json.loads((out / "bundle.json").read_text())
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert size <= 60 * 2 ** 20
    assert f"bundle {out}: {size / 2 ** 20:.1f} MiB" in stdout
    assert info["train_examples"] > 100_000 and info["heldout_examples"] >= 256
    assert info["corpus_dirs"][0].startswith("../") and info["special_ids"]["mask_id"] == 103
    wheels = sorted(p.name.split("-")[0] for p in (out / "wheels").glob("*.whl"))
    assert wheels == ["keras", "namex", "optree"]
    tag = "cp" + PYTHON.replace(".", "")
    assert all(tag in p.name or "py3-none" in p.name for p in (out / "wheels").glob("*.whl"))
    assert info["python"] == PYTHON          # the Python the wheels were asked for
    assert f"for CPython {PYTHON} from " in stdout          # not from the package index
    from reproduce.gpu_bundle import PYTHON_VERSION
    assert PYTHON_VERSION == "3.12"          # the default: the GPU machines' Python so far
    manifest = json.loads((out / "features" / "manifest.json").read_text())
    assert {e["task"] for e in manifest["files"].values()} == {"cola", "sst", "mrpc", "sts", "rte"}
    sizes = {e["task"]: {} for e in manifest["files"].values()}
    for e in manifest["files"].values():
        sizes[e["task"]][e["split"]] = e["examples"]
    assert {t: (n["train"], n["dev"]) for t, n in sizes.items()} == GLUE_SIZES   # the plan test's


def test_rehearsal_two_calls_compile_once_and_every_cell(bundle):
    from base.plots import png_labels
    from reproduce.gpu_recipe import REHEARSAL
    root, here, _ = bundle           # its wheels are for this Python, as the rehearsal installs them
    work = root / "work"
    # The GPU call's environment: no JAX_PLATFORMS, and XLA's CPU code optimised (not the
    # suite's opt-level 0: the fine-tuning steps then run 4x slower, 25.7 vs 6.6 ms) at level 1,
    # not the default: the same run times, compiled faster (call 1 62 -> 55 s alone, medians of
    # 5 and 3, 2026-11-29). CPU code generation only: the programs are the GPU call's.
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    env["XLA_FLAGS"] = "--xla_backend_optimization_level=1"

    def call(number, results, *extra):
        done = subprocess.run(
            ["bash", "scripts/gpu_run.sh", "--rehearse", f"--call={number}",
             f"--bundle_dir={here}", f"--output_dir={results}", f"--work_dir={work}", *extra],
            cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=900, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        # the bundle's keras, installed into an empty folder, not this environment's
        line = next(x for x in done.stdout.splitlines() if x.startswith("keras "))
        assert ".venv" not in line and "site-packages" not in line, line
        return done.stdout

    def cut(number, results, at, *extra):
        """The call stopped by SIGTERM to the script (as a device tool's time limit) once its
        console shows a line starting with `at`: its console text."""
        stopping = subprocess.Popen(
            ["bash", "scripts/gpu_run.sh", "--rehearse", f"--call={number}",
             f"--bundle_dir={here}", f"--output_dir={results}", f"--work_dir={work}", *extra],
            cwd=str(REPO_ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env)
        lines = []
        for line in stopping.stdout:
            lines.append(line)
            if line.split("] ", 1)[-1].startswith(at):
                stopping.send_signal(signal.SIGTERM)
        assert stopping.wait(timeout=300) == 128 + signal.SIGTERM, "".join(lines[-20:])
        text = "".join(lines)
        assert "Traceback" not in text and \
            "gpu_run.sh: stopped by SIGTERM; rerun the same command to continue" in text
        assert (results / "jax_cache.tar.gz").exists()
        return text

    # call 1 stopped between its pre-training stages, then run again: it continues (ConvBERT's
    # pre-training done, not run again), and nothing compiles after its compile stage
    first, second = root / "out1", root / "out2"
    text = cut(1, root / "out1_cut", "== pretrain_electra")
    assert "stopped by SIGTERM in stage pretrain_electra" in text
    assert "**Call 1 stopped by SIGTERM in stage pretrain_electra" in (
        root / "out1_cut" / "results.md").read_text()
    # what the stages before the stop made (no fine-tuning yet: no GLUE figure)
    assert sorted(p.name for p in (root / "out1_cut").iterdir()) == sorted(
        ["results.json", "results.md", "throughput.json", "pretraining_curves.png",
         "gpu_run.log", "jax_cache.tar.gz"])
    # the plan splits the window: pre-training and seed 1 here, seeds 2 and 3 in call 2
    assert "plan: 50 pre-training steps per model" in text and "in call 2" in text
    stdout = call(1, first)
    assert "convbert: pre-trained (50 steps), skipped" in stdout
    assert sorted(p.name for p in first.iterdir()) == sorted(
        ["results.json", "results.md", "throughput.json", "pretraining_curves.png",
         "glue_scores.png", "gpu_run.log", "jax_cache.tar.gz"])
    cache = work / "jax_cache"
    with tarfile.open(first / "jax_cache.tar.gz") as tar:
        packed = sorted(os.path.basename(n) for n in tar.getnames() if n.endswith("-cache"))
    assert packed and packed == sorted(p.name for p in cache.glob("*-cache"))
    data = json.loads((first / "results.json").read_text())
    plan = data["plan"]
    assert plan["calls"]["1"]["seeds"] == [1] and plan["calls"]["2"]["seeds"] == [2, 3]
    assert plan["steps"] == REHEARSAL.max_pretrain_steps      # the CPU's cap
    # compiled once: nothing after the compile stage (in either run of call 1), and the
    # throughput stage timed the training program (25-step calls)
    assert [c["compiles_after_compile_stage"] for c in data["calls"]] == [[], []]
    assert "outputs: all present" in stdout
    md = (first / "results.md").read_text()
    assert md.startswith("# What pre-training buys on GLUE: GPU run, recipe `rehearsal` (its "
                         "numbers answer nothing)\n\n**These numbers answer nothing**: recipe "
                         "`rehearsal` is a check of the path on a tiny model; 50 "
                         "pre-training steps (fewer than 1,000); 1 seed(s) per task")
    assert "GLUE dev examples scored per task: cola 32 of 1,043" in md
    schedule = data["pretrain_lr_schedule"]
    assert schedule == REHEARSAL.lr_schedule(50)
    assert f"the highest rate reached is {schedule['highest_lr']:.3g}, at step " \
           f"{schedule['highest_at']:,}" in md
    for png in ("pretraining_curves.png", "glue_scores.png"):
        labels = png_labels(str(first / png))
        assert all(ax["xlabel"] and ax["ylabel"] for ax in labels) and labels[0]["legend"]

    # call 2 on the same work folder, its compile cache from call 1's archive alone; stopped by
    # SIGTERM (a time limit) while it fine-tunes, then run again: it continues
    shutil.rmtree(cache)
    text = cut(2, root / "out2_cut", "convbert cola seed 2: training",
               f"--compile_cache={first / 'jax_cache.tar.gz'}")
    assert f"jax_cache.tar.gz unpacked into {cache}" in text
    assert "stopped by SIGTERM in stage finetune" in text
    assert "**Call 2 stopped by SIGTERM in stage finetune" in (
        root / "out2_cut" / "results.md").read_text()
    stdout = call(2, second)
    assert "throughput from" in stdout and ("pre-training stopped earlier" in stdout
                                            or "pre-trained (50 steps), skipped" in stdout)
    data = json.loads((second / "results.json").read_text())
    assert [c["call"] for c in data["calls"]] == [1, 1, 2, 2]
    assert [c["finished"] for c in data["calls"]] == [False, True, False, True]
    assert all(c["compiles_after_compile_stage"] == [] for c in data["calls"])
    log = (second / "gpu_run.log").read_text()
    assert log.index("=== call 1") < log.index("gpu_run.sh: stopped") < log.rindex(
        "=== call 1") < log.index("=== call 2") < log.rindex("gpu_run.sh: stopped") \
        < log.rindex("=== call 2")                   # appended, not overwritten
    stopped = {m for m, p in data["pretraining"].items() if p.get("collapsed")}
    for model, p in data["pretraining"].items():
        assert p["global_step"] == (p["global_step"] if model in stopped else 50)
    for model in set(("convbert", "electra", "random")) - stopped:
        assert sorted(data["glue"][model]) == ["cola", "mrpc", "rte", "sst", "sts"]
        for entry in data["glue"][model].values():
            assert entry["summary"][entry["metric"]]["n"] == 3        # every seed
    assert data["cells_not_run"] == []
    md = (second / "results.md").read_text()
    assert "3 seed(s) per task" in md and "call 2 (" in md
    # the real recipe in the rehearsal's work folder: refused in one line naming it
    real = subprocess.run(["bash", "scripts/gpu_run.sh", f"--bundle_dir={here}",
                           f"--output_dir={root / 'out3'}", f"--work_dir={work}"],
                          cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=300,
                          env=env)
    assert real.returncode == 1 and "Traceback" not in real.stdout
    assert (f"error: {work}: a work folder of another run (recipe rehearsal (small with 1 "
            "layer(s) of width 32), not gpu_budget (small)); give another --work_dir, or --fresh "
            "to start it afresh\n") in real.stdout


def test_one_block_size_for_every_planned_length():
    """The programs the compile stage builds (for a one-step build, before the plan) are the
    ones every planned run trains with: the same steps per call (the block the K-step program is
    compiled for) and the same schedule arguments' shape for every planned length from 100 to
    20,000 steps, and for fine-tuning every task at every fraction the plan can choose."""
    from finetune.finetuner import num_train_steps
    from pretrain.hparams import train_settings
    from reproduce.gpu_recipe import GPU_BUDGET, REHEARSAL, finetune_hparams, pretrain_hparams
    from training.loop import call_sizes, largest_call
    bundle = {"vocab_size": 30522, "max_seq_length": 128}
    for recipe in (GPU_BUDGET, REHEARSAL):
        for model in ("convbert", "electra"):
            built = train_settings(pretrain_hparams(recipe, bundle, model, 1))
            assert largest_call(built) == recipe.steps_per_loop == 25
            shape = built.schedule().arguments().shape
            for steps in range(100, 20_001, 100):
                settings = train_settings(pretrain_hparams(recipe, bundle, model, steps))
                assert largest_call(settings) == largest_call(built), steps
                assert settings.schedule().arguments().shape == shape
                assert sum(call_sizes(settings, 0)) == steps
                assert max(call_sizes(settings, 0)) <= largest_call(built)
    for task, size in GLUE_SIZES.items():
        built = finetune_hparams(GPU_BUDGET, task)
        for fraction in (0.05, 0.1397, 0.5, 1.0):
            hp = finetune_hparams(GPU_BUDGET, task, fraction=fraction,
                                  num_train_examples=size[0])
            steps = num_train_steps(size[0], hp.train_batch_size, hp.num_train_epochs,
                                    hp.max_train_steps)
            assert steps >= 1
            # the finetuner's settings differ by length alone (finetune/jax_trainer.py `train`)
            assert (hp.steps_per_loop, hp.log_every_steps) == (built.steps_per_loop,
                                                               built.log_every_steps)


def test_budget_cut_drops_whole_tasks_never_one_model(tmp_path):
    """Fine-tuning runs seed by seed, task by task with every model on a task before the next:
    wherever the budget ends, every (seed, task) has all models' cells or none, random init
    (the baseline) among them; the cells not run are named."""
    from reproduce.gpu_recipe import REHEARSAL
    from reproduce.gpu_stages import Finetuning
    from reproduce.gpu_work import WorkFolder
    from reproduce.recipes import GLUE_TASKS, MODELS

    class Models:
        recipe, tasks = REHEARSAL, list(GLUE_TASKS)

    for budget in range(0, 50, 3):       # every place a cut can fall
        work = WorkFolder(tmp_path / f"work{budget}", REHEARSAL)
        clock = {"t": float(budget)}
        ran = []

        class Cut(Finetuning):
            def trial(self, model, task, trial):
                clock["t"] -= 1.0          # each trial takes 1 s
                path = self.work.metrics_file(model, task, trial)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write("{}")
                ran.append((trial, task, model))

        finetuning = Cut(Models(), None, work, print,
                         trial_seconds={(m, t): 1.0 for m in MODELS for t in GLUE_TASKS})
        not_run = finetuning.run(lambda: clock["t"], lambda: None)
        cells = {(trial, task) for trial, task, _ in ran}
        for trial, task in cells:
            assert sorted(m for s, t, m in ran if (s, t) == (trial, task)) == sorted(MODELS)
        assert len(ran) == 3 * (min(budget, 45) // 3)
        assert set(not_run) == {(s, t) for s in (1, 2, 3) for t in GLUE_TASKS} - cells
        assert ran == sorted(ran, key=lambda c: (c[0], GLUE_TASKS.index(c[1])))
    # a call limited to its planned seeds (call 1 of a two-call plan) leaves the others
    work = WorkFolder(tmp_path / "call1", REHEARSAL)
    only = Cut(Models(), None, work, print, seeds=[1])
    assert only.run(lambda: 1e9, lambda: None) == []
    assert {s for s, _, _ in ran[-15:]} == {1} and len(ran) >= 15


def test_plan_budget_keeps_pre_training_its_share():
    from reproduce.gpu_budget import GPU_BUDGET, LOOP_OVERHEAD, SMOKE, plan_budget
    # Room for everything: one full fine-tuning seed, pre-training gets the rest.
    plan = plan_budget(615.0, 200.0, 0.05, GPU_BUDGET)
    assert plan["finetune_step_fraction"] == 1.0 and plan["pretrain_seconds"] == 400.0
    assert plan["steps"] == int(400 / (LOOP_OVERHEAD * 0.05)) // 100 * 100 >= 4900
    # The first H200 run: 317 s left, one seed estimated at 497 s. Pre-training keeps half,
    # fine-tuning is shortened to fit the other half.
    plan = plan_budget(317.0, 497.0, 0.434, GPU_BUDGET)
    assert plan["pretrain_seconds"] == 151.0
    assert plan["finetune_step_fraction"] == pytest.approx(151.0 / 497.0, abs=1e-4)
    assert plan["steps"] == 200
    # The H100 run (docs/RESULTS.md §12): 264 s left, both steps 61.7 ms, one held-out evaluation
    # of both models ~9 s: 9 of them come out of pre-training's half before the steps.
    plan = plan_budget(264.0, 479.0, 0.0617, GPU_BUDGET, heldout_s=9.0)
    assert plan["pretrain_seconds"] == 124.5
    assert plan["steps"] == int((124.5 - 9 * 9.0) / (LOOP_OVERHEAD * 0.0617)) // 100 * 100 == 400
    # Never fewer than 100 steps; the smoke recipe's steps are fixed.
    assert plan_budget(20.0, 497.0, 0.434, GPU_BUDGET)["steps"] == 100
    assert plan_budget(20.0, 497.0, 0.434, GPU_BUDGET, heldout_s=50.0)["steps"] == 100
    smoke = plan_budget(20.0, 497.0, 0.434, SMOKE)
    assert (smoke["steps"], smoke["finetune_step_fraction"], smoke["seeds"]) == (4, 1.0, 2)
    # seeds at full length while pre-training keeps its share: two of 100 s each fit 300 s
    plan = plan_budget(615.0, 100.0, 0.05, GPU_BUDGET)
    assert (plan["seeds"], plan["finetune_step_fraction"], plan["pretrain_seconds"]) == (
        3, 1.0, 300.0)
    plan = plan_budget(615.0, 140.0, 0.05, GPU_BUDGET)
    assert (plan["seeds"], plan["finetune_step_fraction"], plan["pretrain_seconds"]) == (
        2, 1.0, 320.0)


# The GPU figures the plan test feeds plan_budget: what the three GPU runs recorded
# (docs/RESULTS.md §11-§13, docs/PERFORMANCE.md P4): build, compile and throughput stages (s),
# the RTD and fine-tuning steps timed alone (ms) and one held-out evaluation of both models (s;
# the H200 run recorded none: §12's 9 s).
RECORDED_GPU_RUNS = {
    "H100 2026-11-27 (§13.2)": dict(fixed_s=33 + 118 + 15, build_s=33, compile_s=118,
                                    rtd_ms=(50.4, 32.0), finetune_ms=(30.5, 19.7),
                                    heldout_s=10.0),
    "H100 2026-11-26 (§12)": dict(fixed_s=31 + 111 + 3, build_s=31, compile_s=111,
                                  rtd_ms=(37.2, 24.5), finetune_ms=(14.4, 8.7), heldout_s=9.0),
    "H200 2026-11-26 (§11)": dict(fixed_s=48 + 90 + 15, build_s=48, compile_s=90,
                                  rtd_ms=(233.0, 201.0), finetune_ms=(19.4, 12.9),
                                  heldout_s=9.0),
}
# What plan_budget makes of them (test_plan_fits_the_window_at_recorded_and_target_rates): steps
# per model, seeds over both calls, fraction of the official fine-tuning steps, the schedule's
# highest learning rate and the step whose update uses it.
EXPECTED_AFFORDS = {
    "H100 2026-11-27 (§13.2)": (1200, 3, 0.0568, 4.8e-05, 961),
    "H100 2026-11-26 (§12)": (2000, 3, 0.1261, 7.99e-05, 1601),
    "H200 2026-11-26 (§11)": (200, 3, 0.0826, 8e-06, 161),
    "P4 targets": (3900, 3, 0.601, 0.000156, 3121),
    "P4 targets, compile cache carried": (7800, 3, 0.7264, 0.00031, 6241),
}
# The GLUE features the bundle holds (training examples with MRPC and STS-B in both orders, dev
# examples): checked against the bundle in test_bundle_is_small_and_complete.
GLUE_SIZES = {"cola": (8551, 1043), "sst": (67349, 872), "mrpc": (7336, 408),
              "sts": (11498, 1500), "rte": (2490, 277)}


def target_run():
    """The P4 targets (issue 48): ConvBERT 8,000 and ELECTRA 12,000 RTD sequences/s at batch
    128; the fine-tuning step (batch 32) at the same model-FLOPs rate (model/flops.py: a
    fine-tuning step is 0.18 of an RTD step's FLOPs); build, compile and held-out evaluation as
    the slower H100 recorded them (cold: no compile cache)."""
    from model import ConvBertConfig
    from model.flops import forward_flops_per_token, generator_config, rtd_model_flops_per_sequence
    rtd_ms, finetune_ms = [], []
    for rate, arch in ((8000, {}), (12000, {"conv_type": "none", "head_ratio": 1})):
        config = ConvBertConfig.from_size("small", vocab_size=30522, **arch)
        ratio = (32 * 3 * 128 * forward_flops_per_token(config, 128)) / (
            128 * rtd_model_flops_per_sequence(config, generator_config(config, 0.25), 128))
        rtd_ms.append(1e3 * 128 / rate)
        finetune_ms.append(rtd_ms[-1] * ratio)
    return dict(RECORDED_GPU_RUNS["H100 2026-11-27 (§13.2)"], rtd_ms=tuple(rtd_ms),
                finetune_ms=tuple(finetune_ms))


def target_run_cached():
    """`target_run` with the P4 targets for the rest too: the compile cache carried (first step
    <= 20 s cached) and a held-out point <= 1 s."""
    return dict(target_run(), fixed_s=33 + 20 + 15, compile_s=20, heldout_s=1.0)


def test_plan_fits_the_window_at_recorded_and_target_rates():
    """The default budgets of both calls fit the session's window, and the plan made from each
    GPU run's recorded figures, and from the P4 target rates, ends inside call 1 with the plan's
    stated margins and leaves call 2 what it affords (reproduce/gpu_plan.py); the steps, seeds,
    fraction and the highest learning rate each affords."""
    from reproduce import gpu_plan
    from reproduce.gpu_recipe import GPU_BUDGET
    from reproduce.recipes import MODELS
    budget = gpu_plan.DEFAULT_BUDGET_S
    assert budget + sum(gpu_plan.OUTSIDE_BUDGET_S.values()) <= gpu_plan.COMMAND_LIMIT_S
    assert (gpu_plan.SECOND_BUDGET_S + sum(gpu_plan.SECOND_OUTSIDE_S.values())
            <= gpu_plan.SECOND_COMMAND_LIMIT_S)
    assert (gpu_plan.OUTSIDE_BUDGET_S["start-up and copy"] + gpu_plan.COMMAND_LIMIT_S
            + gpu_plan.SECOND_COMMAND_LIMIT_S + 2 * gpu_plan.WARM_S) <= gpu_plan.WINDOW_S
    affords = {}
    for name, run in {**RECORDED_GPU_RUNS, "P4 targets": target_run(),
                      "P4 targets, compile cache carried": target_run_cached()}.items():
        step_s = {"convbert": run["finetune_ms"][0] / 1e3, "electra": run["finetune_ms"][1] / 1e3,
                  "random": run["finetune_ms"][0] / 1e3}
        seed_s = gpu_plan.finetune_seed_seconds(GLUE_SIZES, step_s, GPU_BUDGET, MODELS)
        second = gpu_plan.second_call_seconds(run["build_s"], run["compile_s"])
        plan = gpu_plan.plan_budget(budget - run["fixed_s"], seed_s, sum(run["rtd_ms"]) / 1e3,
                                    GPU_BUDGET, run["heldout_s"], second_call_s=second)
        end = run["fixed_s"] + plan["estimate"]["end_s"]
        assert end <= budget, (name, plan)
        assert plan["calls"]["2"]["finetune_s"] <= second + 0.1, (name, plan)
        schedule = GPU_BUDGET.lr_schedule(plan["steps"])
        affords[name] = (plan["steps"], plan["seeds"], plan["finetune_step_fraction"],
                         schedule["highest_lr"], schedule["highest_at"])
    # what each affords: (pre-training steps per model, seeds over both calls, fraction of the
    # official fine-tuning steps, the highest learning rate and its step); docs/GPU.md "The
    # budget arithmetic" quotes these
    assert affords == EXPECTED_AFFORDS, affords


def test_learning_rate_schedules_and_what_a_rerun_has_left(tmp_path):
    """The budget schedule (ELECTRA-small's official schedule, then a cool-down to 0 over the
    run's last 20%) as the reports state it and as the training core runs it, never above the
    official schedule at any step and as high as that allows; the schedules of the earlier GPU
    runs still selectable; `GpuRun.work_left` from the work folder."""
    import dataclasses
    from pretrain.hparams import train_settings
    from reproduce.gpu_budget import GPU_BUDGET, SMOKE, GpuRun, Log, schedule_text
    from reproduce.gpu_recipe import pretrain_hparams
    assert schedule_text(GPU_BUDGET.lr_schedule(10_000), 10_000) == (
        "Pre-training learning rate: linear warm-up over 10,000 steps towards 0.0005, times a "
        "linear decay reaching 0 at step 1,000,000, then a linear cool-down to 0 over the run's "
        "last 2,000 steps (it trains 10,000); the highest rate reached is 0.000397, at step "
        "8,001.")
    # the peak at the planned length: the official ramp's value where the cool-down starts
    assert GPU_BUDGET.lr_schedule(6_500)["highest_lr"] == 2.59e-4
    official = dataclasses.replace(GPU_BUDGET, cooldown_fraction=0.0)      # §13.2's
    assert official.lr_schedule(300)["highest_lr"] == 1.49e-5
    assert "reaching 0 at step 1,000,000 (the run trains its first 300 steps)" in schedule_text(
        official.lr_schedule(300), 300)
    earlier = dataclasses.replace(official, schedule_steps=0)     # decay to 0 at the end
    assert earlier.lr_schedule(6_500)["highest_lr"] == 8.13e-5
    squeezed = dataclasses.replace(earlier, warmup_steps=0).lr_schedule(1800)   # §11-§12's
    assert squeezed["warmup_steps"] == 180 and squeezed["highest_lr"] == 4.5e-4
    fake_bundle = {"vocab_size": 30522, "max_seq_length": 128}
    for steps in (100, 300, 6_500, 10_000, 30_000):
        core = train_settings(pretrain_hparams(GPU_BUDGET, fake_bundle, "electra", steps)
                              ).schedule()
        rates = [GPU_BUDGET.lr_at(step, steps) for step in range(steps)]
        for step in list(range(0, steps, 97)) + [steps - 2, steps - 1]:
            assert float(core.host_value(step)) == pytest.approx(rates[step], rel=1e-3,
                                                                 abs=1e-12)   # float32
        # at or below the official schedule at every step, equal to it before the cool-down
        assert all(lr <= official.lr_at(step, 1_000_000) + 1e-15
                   for step, lr in enumerate(rates))
        cool = GPU_BUDGET.cooldown(steps)
        assert rates[steps - cool - 1] == official.lr_at(steps - cool - 1, 1_000_000)
        assert rates[-1] <= rates[0] + GPU_BUDGET.pretrain["learning_rate"] / cool
    out = tmp_path / "bundle"                  # GpuRun reads bundle.json alone until it runs
    out.mkdir()
    (out / "bundle.json").write_text(json.dumps({**fake_bundle, "made": "now"}))
    work = tmp_path / "work"
    run = GpuRun(SMOKE, str(out), str(tmp_path / "out"), str(work), 100, Log())
    assert run.work_left(4) == (("convbert", "electra"), True)
    for model, step in (("convbert", 4), ("electra", 2)):
        (work / "pretrain" / model).mkdir(parents=True)
        (work / "pretrain" / model / "pretraining_summary.json").write_text(
            json.dumps({"global_step": step}))
    assert run.work_left(4) == (("electra",), True)
    for model in ("convbert", "electra", "random"):
        results = work / "finetune" / model / "results"
        results.mkdir(parents=True)
        for task in ("cola", "sst", "mrpc", "sts", "rte"):
            for trial in (1, 2):
                (results / f"{task}_dev_metrics_trial{trial}.json").write_text("{}")
    assert run.work_left(2) == ((), False)
    # a model whose pre-training the collapse check stopped is done, and not fine-tuned
    (work / "pretrain" / "electra" / "collapsed.json").write_text(json.dumps(
        {"reason": "held-out discriminator AUC fell", "record": {}}))
    for task in ("cola", "sst", "mrpc", "sts", "rte"):
        (work / "finetune" / "electra" / "results" / f"{task}_dev_metrics_trial2.json").unlink()
    assert run.work_left(4) == ((), False)


def test_collapse_stop_and_the_answer_lines():
    """gpu_stages.collapse: a held-out AUC back at the prior after learning, or still there at
    the run's middle; the report's opening names a stopped model and the anchors."""
    import dataclasses
    from reproduce.gpu_recipe import GPU_BUDGET, SMOKE
    from reproduce.gpu_report import answer
    from reproduce.gpu_stages import collapse
    from reproduce.report import compare_models
    assert collapse([(1000, 0.93), (2000, 0.91)], 8000, GPU_BUDGET) is None
    assert collapse([(1000, 0.93), (2000, 0.515)], 8000, GPU_BUDGET) == (
        "held-out discriminator AUC fell to 0.515 at step 2000 (the prior is 0.5) from 0.930")
    assert collapse([(1000, 0.51)], 8000, GPU_BUDGET) is None         # early: not yet
    assert collapse([(1000, 0.51), (4000, 0.503)], 8000, GPU_BUDGET) == (
        "held-out discriminator AUC still 0.503 at step 4000 of 8000 (the prior is 0.5)")
    assert collapse([(4, 0.5)], 4, SMOKE) is None                     # the smoke: no check
    assert collapse([(4, 0.6)], 4, dataclasses.replace(GPU_BUDGET, collapse_margin=0.2))
    data = {"scale": "gpu_budget", "budget_used": {"steps": 6500, "tokens": 6500 * 128 * 128,
                                                   "fraction_of_official": 0.0065},
            "pretraining": {"convbert": {"global_step": 6500},
                            "electra": {"global_step": 2000, "collapsed": "held-out ... fell"}}}
    text = answer(data)
    assert "**Pre-training**: 6,500 steps per model (106,496,000 tokens each: 0.65% of " \
           "ELECTRA-small's official budget, 1,000,000 steps x 128 x 128)." in text
    assert "**ELECTRA (BERT architecture): pre-training stopped at step 2,000: held-out ... " \
           "fell. Not fine-tuned.**" in text
    assert "74.1" in text and "not these five" in text

    def entry(mean, std, n):
        return {"metric": "accuracy", "summary": {"accuracy": {"mean": mean, "std": std,
                                                               "n": n, "median": mean}}}
    glue = {"convbert": {"sst": entry(80.0, 1.0, 3), "rte": entry(55.0, 0.0, 1)},
            "electra": {"sst": entry(77.0, 2.0, 3), "rte": entry(53.0, 0.0, 1)}}
    assert compare_models(glue, "convbert", "electra") == {
        "sst": {"difference": 3.0, "beyond_spread": True},
        "rte": {"difference": 2.0, "beyond_spread": False}}        # one seed: no spread


def test_heldout_points_survive_a_stop(tmp_path):
    """A pre-training stopped mid-way keeps the held-out points it scored: the rerun resumes
    from the stop's checkpoint and scores the points after it, and the collapse check and the
    curve see them all; a point from steps the rerun trains again is replaced."""
    from reproduce.gpu_stages import HeldoutPoints
    first = HeldoutPoints(str(tmp_path))
    for step, auc in ((25, 0.61), (50, 0.72), (75, 0.8)):
        first.add(step, {"disc_auc": auc, "gen_accuracy": 0.1}, values=f"snapshot {step}")
    # stopped after step 75's point, its checkpoint at step 60: the rerun scores 75 again
    again = HeldoutPoints(str(tmp_path))
    assert again.aucs() == [(25, 0.61), (50, 0.72), (75, 0.8)]
    again.add(75, {"disc_auc": 0.81, "gen_accuracy": 0.2}, values="snapshot 75")
    again.add(100, {"disc_auc": 0.83, "gen_accuracy": 0.3}, values="snapshot 100")
    assert again.aucs() == [(25, 0.61), (50, 0.72), (75, 0.81), (100, 0.83)]
    assert again.last_step() == 100
    rows = again.curve(lambda values: len(values))
    assert [("disc_auc_last_gen" in r, r["step"]) for r in rows] == [
        (False, 25), (False, 50), (True, 75), (True, 100)]
    assert rows[3] == {"step": 100, "disc_auc": 0.83, "gen_accuracy": 0.3,
                       "disc_auc_last_gen": len("snapshot 100")}
    assert HeldoutPoints(str(tmp_path)).aucs() == again.aucs()      # on disk as scored
    # a rerun from no checkpoint at all (stopped before the first): every point again
    fresh = HeldoutPoints(str(tmp_path))
    fresh.add(25, {"disc_auc": 0.6, "gen_accuracy": 0.1}, values="s")
    assert fresh.aucs() == [(25, 0.6)]


def test_work_folder_belongs_to_one_run(tmp_path):
    """A work folder holds one run's plan, checkpoints and results: another recipe, seed or
    bundle is refused in one line naming the folder; --fresh removes what the run wrote (not the
    compile cache); the smoke and the real run have different default folders."""
    from reproduce.gpu_recipe import GPU_BUDGET, SMOKE
    from reproduce.gpu_work import WorkFolder, WorkFolderError, default_work_dir
    assert default_work_dir(True) != default_work_dir(False)
    bundle = {"made": "2026-11-27 10:00 UTC", "vocab_size": 30522, "max_seq_length": 128,
              "train_examples": 247303, "heldout_examples": 13689}
    work = tmp_path / "work"
    smoke = WorkFolder(work, SMOKE)
    smoke.claim(bundle, 0)
    (work / "plan.json").write_text('{"steps": 4}')
    (work / "pretrain" / "convbert").mkdir(parents=True)
    (work / "jax_cache").mkdir()
    smoke.claim(bundle, 0)                                  # the same run: resumes
    with pytest.raises(WorkFolderError) as e:
        WorkFolder(work, GPU_BUDGET).claim(bundle, 0)
    assert str(e.value).startswith(f"{work}: a work folder of another run (recipe smoke")
    with pytest.raises(WorkFolderError, match="seed 0, not 1"):
        smoke.claim(bundle, 1)
    with pytest.raises(WorkFolderError, match="bundle made 2026-11-27 10:00 UTC, not x"):
        smoke.claim({**bundle, "made": "x"}, 0)
    WorkFolder(work, GPU_BUDGET).claim(bundle, 0, fresh=True)
    assert sorted(p.name for p in work.iterdir()) == ["jax_cache", "work.json"]
    assert json.loads((work / "work.json").read_text())["recipe"] == "gpu_budget"
    (work / "work.json").unlink()
    (work / "plan.json").write_text("{}")                   # a folder from before work.json
    with pytest.raises(WorkFolderError, match="no work.json"):
        WorkFolder(work, GPU_BUDGET).claim(bundle, 0)


def test_bundle_wheels_for_another_python_are_refused(tmp_path):
    """scripts/gpu_run.sh on a Python without Keras whose version is not the bundle's: one line,
    before anything runs."""
    python = shutil.which("python3", path="/usr/bin")
    if python is None or subprocess.run([python, "-c", "import keras"],
                                        capture_output=True).returncode == 0:
        pytest.skip("needs a Python without keras in /usr/bin")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.json").write_text(json.dumps({"python": "3.99"}))
    done = subprocess.run(["bash", "scripts/gpu_run.sh", f"--bundle_dir={bundle}",
                           f"--output_dir={tmp_path / 'out'}"], cwd=str(REPO_ROOT),
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": python})
    assert done.returncode == 2
    assert f"{bundle}/wheels are for CPython 3.99" in done.stderr
    assert "bash scripts/gpu_bundle.sh --python_version=" in done.stderr


def test_random_finetune_check_runs_from_the_bundle(bundle, tmp_path):
    """reproduce/gpu_random_finetune.py (the random-init row alone) on the CPU with the smoke
    model: one step, the dev metrics and the distinct predictions in its JSON."""
    _, out, _ = bundle
    result = tmp_path / "random.json"
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "reproduce/gpu_random_finetune.py", f"--bundle_dir={out}",
         "--tasks=rte", "--max_steps=1", "--precision=fp32", "--smoke", f"--output={result}",
         f"--jax_cache_dir={tmp_path / 'jax_cache'}"],
        cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert list((tmp_path / "jax_cache").glob("*-cache"))      # its programs, cached there
    data = json.loads(result.read_text())
    rte = data["tasks"]["rte"]
    assert rte["steps"] == 1 and 0.0 <= rte["dev"]["accuracy"] <= 100.0
    assert 1 <= rte["distinct_predictions"] <= 2
    assert data["precision"] == "fp32" and data["fraction"] == 0.35


def test_rtd_probe_variants_start_from_the_same_weights(bundle, tmp_path):
    """reproduce/gpu_rtd_probe.py on the smoke model: every variant's held-out points, the
    discriminator's spread, and the schedules it was asked for."""
    _, out, _ = bundle

    def probe(name, *flags):
        """The probe's JSON after `--smoke --steps=4 --points=2` and `flags`."""
        result = tmp_path / f"{name}.json"
        env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
               "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "reproduce/gpu_rtd_probe.py", f"--bundle_dir={out}", "--smoke",
             "--steps=4", "--points=2", "--heldout_examples=16", *flags,
             f"--output={result}"],
            cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "JAX compilation cache: " in done.stdout
        return result, json.loads(result.read_text())

    result, data = probe("probe", "--schedule_steps=40", "--variants=run,warmup10x,lowlr")
    runs = data["variants"]
    assert {k: v["warmup_steps"] for k, v in runs.items()} == {"run": 4, "warmup10x": 40,
                                                               "lowlr": 4}
    assert runs["lowlr"]["peak_lr"] == pytest.approx(runs["run"]["peak_lr"] / 10)
    for variant in runs.values():
        assert [p["step"] for p in variant["points"]] == [2, 4]
        assert 0.0 <= variant["points"][-1]["disc_auc"] <= 1.0
        assert -1.0 <= variant["hidden_cosine"] <= 1.0 and variant["disc_logit_std"] >= 0.0
    # the schedule is the 40-step run's (ELECTRA's: linear decay from step 0, times the warm-up
    # ramp), stopped after 4 steps
    decay = 1 - 4 / 40
    assert runs["run"]["points"][-1]["learning_rate"] == pytest.approx(5e-4 * decay, rel=1e-3)
    assert runs["warmup10x"]["points"][-1]["learning_rate"] == pytest.approx(
        5e-4 * decay * 4 / 40, rel=1e-3)
    # the budget schedules at the planned length (decay to 0 at step 4), the collapse stop
    # (every point "at the prior" with a margin of 0.6: stopped at the run's middle)
    _, budget = probe("budget", "--collapse_margin=0.6",
                      "--variants=warmup40,warmup4@1e-3,recipe")
    assert budget["ranking"] == []
    # the run's own schedule (the smoke's: official warm-up and decay, a 1-step cool-down)
    recipe = budget["variants"]["recipe"]
    assert (recipe["warmup_steps"], recipe["schedule_steps"], recipe["cooldown_steps"]) == (
        10_000, 1_000_000, 1)
    assert recipe["points"][0]["learning_rate"] == pytest.approx(
        5e-4 * 2 / 10_000 * (1 - 2 / 1e6), rel=1e-3)
    for name, peak, warmup in (("warmup40", 5e-4, 40), ("warmup4@1e-3", 1e-3, 4)):
        assert budget["variants"][name]["cooldown_steps"] == 0
        variant = budget["variants"][name]
        assert (variant["peak_lr"], variant["warmup_steps"], variant["schedule_steps"]) == (
            pytest.approx(peak), warmup, 4)
        assert [p["step"] for p in variant["points"]] == [2]
        assert variant["points"][0]["learning_rate"] == pytest.approx(
            peak * min(1, 2 / warmup) * (1 - 2 / 4), rel=1e-3)
        assert variant["collapsed"].startswith("held-out discriminator AUC still")
    # the figure of docs/RESULTS.md, from the JSON alone
    from base.plots import png_labels
    from reproduce.gpu_rtd_probe import main as probe_main
    png = tmp_path / "probe.png"
    assert probe_main([f"--plot={png}", f"--inputs={result}"]) == 0
    (auc, lr) = png_labels(str(png))
    assert auc["ylabel"].startswith("ROC AUC") and lr["ylabel"] == "learning rate"
    assert len(auc["legend"]) == 3 and "lowlr" in auc["legend"][2]


def test_profile_rtd_step_uses_the_runs_settings():
    """benchmarks/gpu_profile.py --rtd profiles the gpu_budget recipe's step: its settings (kept in
    the benchmark, which may not import reproduce/) are the recipe's."""
    backend = os.environ.get("KERAS_BACKEND")
    from benchmarks.gpu_profile import RTD_PRETRAIN
    from reproduce.gpu_budget import GPU_BUDGET
    recipe = {**GPU_BUDGET.pretrain, "model_size": GPU_BUDGET.model_size}
    assert RTD_PRETRAIN == {k: recipe[k] for k in RTD_PRETRAIN}
    # importing them leaves this process's backend (and its subprocesses') alone
    assert os.environ.get("KERAS_BACKEND") == backend
