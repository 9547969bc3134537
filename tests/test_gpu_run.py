"""The prepared GPU run end to end on the CPU (docs/GPU.md): `bash scripts/gpu_bundle.sh` builds the
bundle from ../shared (<= 60 MiB), then `bash scripts/gpu_run.sh --smoke` runs every stage on
Keras-on-JAX with `tensorflow` unimportable and leaves every output file and every model x task
cell, JAX's compilation cache packed among them. A rerun of the same command resumes: nothing is
trained again, and its cache comes from that archive (--compile_cache)."""
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO_ROOT, shared_path
from tests.zygote import script_python


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    pytest.importorskip("jax")
    shared = shared_path("data").parent
    root = tmp_path_factory.mktemp("gpu")
    out = root / "bundle"
    env = dict(os.environ)
    env["PYTHON"] = script_python(env)     # its Python and the builders it runs: zygote forks
    done = subprocess.run(["bash", "scripts/gpu_bundle.sh", f"--output_dir={out}",
                           f"--build_dir={root / 'build'}", f"--shared_dir={shared}"],
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
    assert all("cp312" in p.name or "py3-none" in p.name for p in (out / "wheels").glob("*.whl"))
    assert info["python"] == "3.12"          # the GPU machine's Python the wheels are for
    manifest = json.loads((out / "features" / "manifest.json").read_text())
    assert {e["task"] for e in manifest["files"].values()} == {"cola", "sst", "mrpc", "sts", "rte"}
    sizes = {e["task"]: {} for e in manifest["files"].values()}
    for e in manifest["files"].values():
        sizes[e["task"]][e["split"]] = e["examples"]
    assert {t: (n["train"], n["dev"]) for t, n in sizes.items()} == GLUE_SIZES   # the plan test's


def test_smoke_run_end_to_end_and_resume(bundle):
    from base.plots import png_labels
    root, out, _ = bundle
    results, work = root / "out", root / "work"
    cmd = ["bash", "scripts/gpu_run.sh", "--smoke", f"--bundle_dir={out}",
           f"--output_dir={results}", f"--work_dir={work}"]
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run(cmd, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=900,
                          env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in results.iterdir()) == sorted(
        ["results.json", "results.md", "throughput.json", "pretraining_curves.png",
         "glue_scores.png", "gpu_run.log", "jax_cache.tar.gz"])
    # JAX's compilation cache in the work folder, packed for the next machine (--compile_cache)
    cache = work / "jax_cache"
    assert f"JAX compilation cache: {cache}, 0 programs (--jax_cache_dir)" in done.stdout
    with tarfile.open(results / "jax_cache.tar.gz") as tar:
        packed = sorted(os.path.basename(n) for n in tar.getnames() if n.endswith("-cache"))
    assert packed and packed == sorted(p.name for p in cache.glob("*-cache"))
    assert f"compile cache: {len(packed)} programs packed into" in done.stdout
    data = json.loads((results / "results.json").read_text())
    for model in ("convbert", "electra", "random"):
        assert sorted(data["glue"][model]) == ["cola", "mrpc", "rte", "sst", "sts"]
        for entry in data["glue"][model].values():
            assert entry["summary"][entry["metric"]]["n"] == 2        # two seeds
    # the budget schedule: the official 10,000-step warm-up times a linear decay to 0 at the
    # planned 4th step, lr = 5e-4 * step / 10,000 * (1 - step / 4) (steps 0..3)
    assert data["pretrain_lr_schedule"] == {"peak_lr": 5e-4, "warmup_steps": 10_000,
                                            "schedule_steps": 4, "highest_lr": 5e-8,
                                            "highest_at": 2}
    for model in ("convbert", "electra"):
        p = data["pretraining"][model]
        assert p["global_step"] == 4 and len(p["heldout"]) == 2
        assert p["history"][-1]["learning_rate"] == pytest.approx(5e-4 * 3 / 10_000 / 4,
                                                                  rel=1e-3)
        assert all("disc_auc_last_gen" in h for h in p["heldout"])
    assert all(r > 0 for r in data["pretraining_loop_over_timed"].values())
    # the report leads with the answer: steps, tokens, the share of the official budget
    assert data["budget_used"] == {"steps": 4, "tokens": 4 * 8 * 128,
                                   "fraction_of_official": 4 * 8 * 128 / 1e6 / 128 / 128}
    tp = json.loads((results / "throughput.json").read_text())
    assert tp["platform"] == "cpu" and set(tp["models"]) == {"convbert", "electra"}
    assert "outputs: all present" in (results / "gpu_run.log").read_text()
    md = (results / "results.md").read_text()
    assert md.startswith("# What pre-training buys on GLUE: GPU run, recipe `smoke`\n\n"
                         "**Pre-training**: 4 steps per model (4,096 tokens each: 0.00% of "
                         "ELECTRA-small's official budget")
    assert "**Answer** (2 seed(s) per task): pre-training beats random init beyond the seed " \
           "spread: ConvBERT on " in md
    assert "ELECTRA-Small, fully trained (1M steps) 79.9" in md and "Held-out batch" in md
    assert md.index("| ConvBERT, random init |") < md.index("## How the run went") \
        < md.index("sequences/s")
    for png in ("pretraining_curves.png", "glue_scores.png"):
        labels = png_labels(str(results / png))
        assert all(ax["xlabel"] and ax["ylabel"] for ax in labels) and labels[0]["legend"]
    shutil.rmtree(cache)      # the rerun's cache comes from the archive alone
    again = subprocess.run(cmd + [f"--compile_cache={results / 'jax_cache.tar.gz'}"],
                           cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=900,
                           env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"jax_cache.tar.gz unpacked into {cache}" in again.stdout
    assert f"JAX compilation cache: {cache}, {len(packed)} programs" in again.stdout
    assert "pre-trained (4 steps), skipped" in again.stdout
    # the first run's timings and plan stand; nothing is compiled or timed again
    assert "throughput from" in again.stdout and "precompile: nothing left to run" in again.stdout
    assert json.loads((results / "throughput.json").read_text()) == tp
    assert "training 3 steps" not in again.stdout          # every fine-tuning trial was kept
    assert json.loads((results / "results.json").read_text())["glue"] == data["glue"]
    # the real recipe in the smoke's work folder: refused in one line naming it
    real = subprocess.run([a for a in cmd if a != "--smoke"], cwd=str(REPO_ROOT),
                          capture_output=True, text=True, timeout=300, env=env)
    assert real.returncode == 1 and "Traceback" not in real.stdout
    assert (f"error: {work}: a work folder of another run (recipe smoke (small with 1 layer(s) "
            "of width 32), not gpu_budget (small)); give another --work_dir, or --fresh to start "
            "it afresh\n") in real.stdout


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
    "H100 2026-11-27 (§13.2)": dict(fixed_s=33 + 118 + 15, rtd_ms=(50.4, 32.0),
                                    finetune_ms=(30.5, 19.7), heldout_s=10.0),
    "H100 2026-11-26 (§12)": dict(fixed_s=31 + 111 + 3, rtd_ms=(37.2, 24.5),
                                  finetune_ms=(14.4, 8.7), heldout_s=9.0),
    "H200 2026-11-26 (§11)": dict(fixed_s=48 + 90 + 15, rtd_ms=(233.0, 201.0),
                                  finetune_ms=(19.4, 12.9), heldout_s=9.0),
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
    return dict(target_run(), fixed_s=33 + 20 + 15, heldout_s=1.0)


def test_plan_fits_one_call_at_recorded_and_target_rates():
    """The default budget and the plan made from each GPU run's recorded figures, and from the
    P4 target rates, end inside one 9-minute call with the plan's stated margins
    (reproduce/gpu_plan.py); the steps and seeds each affords."""
    from reproduce import gpu_plan
    from reproduce.gpu_recipe import GPU_BUDGET
    from reproduce.recipes import MODELS
    budget = gpu_plan.DEFAULT_BUDGET_S
    assert budget + sum(gpu_plan.OUTSIDE_BUDGET_S.values()) <= gpu_plan.COMMAND_LIMIT_S
    affords = {}
    for name, run in {**RECORDED_GPU_RUNS, "P4 targets": target_run(),
                      "P4 targets, compile cache carried": target_run_cached()}.items():
        step_s = {"convbert": run["finetune_ms"][0] / 1e3, "electra": run["finetune_ms"][1] / 1e3,
                  "random": run["finetune_ms"][0] / 1e3}
        seed_s = gpu_plan.finetune_seed_seconds(GLUE_SIZES, step_s, GPU_BUDGET, MODELS)
        plan = gpu_plan.plan_budget(budget - run["fixed_s"], seed_s, sum(run["rtd_ms"]) / 1e3,
                                    GPU_BUDGET, run["heldout_s"])
        end = run["fixed_s"] + plan["estimate"]["end_s"]
        assert end <= budget, (name, plan)
        assert end + sum(gpu_plan.OUTSIDE_BUDGET_S.values()) <= gpu_plan.COMMAND_LIMIT_S
        affords[name] = (plan["steps"], plan["seeds"], plan["finetune_step_fraction"])
    # what each affords: (pre-training steps per model, seeds, fraction of the official
    # fine-tuning steps); docs/GPU.md "The budget arithmetic" quotes these
    assert affords == {"H100 2026-11-27 (§13.2)": (400, 1, 0.1397),
                       "H100 2026-11-26 (§12)": (700, 1, 0.3225),
                       "H200 2026-11-26 (§11)": (100, 1, 0.2279),
                       "P4 targets": (2300, 1, 1.0),
                       "P4 targets, compile cache carried": (6500, 1, 1.0)}


def test_learning_rate_schedules_and_what_a_rerun_has_left(tmp_path):
    """The budget schedule (the official warm-up, decay to 0 at the planned last step) as the
    reports state it and as the training core runs it, never above the official schedule at any
    step; the schedules of the earlier GPU runs still selectable; `GpuRun.work_left` from the
    work folder."""
    import dataclasses
    from pretrain.hparams import train_settings
    from reproduce.gpu_budget import GPU_BUDGET, SMOKE, GpuRun, Log, schedule_text
    from reproduce.gpu_recipe import pretrain_hparams
    assert schedule_text(GPU_BUDGET.lr_schedule(10_000), 10_000) == (
        "Pre-training learning rate: linear warm-up over 10,000 steps towards 0.0005, times a "
        "linear decay reaching 0 at the run's last step (10,000); the highest rate reached is "
        "0.000125, at step 5,000.")
    official = dataclasses.replace(GPU_BUDGET, schedule_steps=1_000_000)     # §13.2's
    assert official.lr_schedule(300)["highest_lr"] == 1.49e-5
    assert "reaching 0 at step 1,000,000 (the run trains its first 300 steps)" in schedule_text(
        official.lr_schedule(300), 300)
    squeezed = dataclasses.replace(GPU_BUDGET, warmup_steps=0).lr_schedule(1800)   # §11-§12's
    assert squeezed["warmup_steps"] == 180 and squeezed["highest_lr"] == 4.5e-4
    fake_bundle = {"vocab_size": 30522, "max_seq_length": 128}
    for steps in (300, 6_500, 10_000, 30_000):
        core = train_settings(pretrain_hparams(GPU_BUDGET, fake_bundle, "electra", steps)
                              ).schedule()
        for step in range(0, steps, 97):
            lr = GPU_BUDGET.lr_at(step, steps)
            assert float(core.host_value(step)) == pytest.approx(lr, rel=1e-3)   # float32
            assert lr <= official.lr_at(step, steps) + 1e-12
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
    _, budget = probe("budget", "--collapse_margin=0.6", "--variants=warmup40,warmup4@1e-3")
    assert budget["ranking"] == []
    for name, peak, warmup in (("warmup40", 5e-4, 40), ("warmup4@1e-3", 1e-3, 4)):
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
    assert RTD_PRETRAIN == {k: GPU_BUDGET.pretrain[k] for k in RTD_PRETRAIN}
    # importing them leaves this process's backend (and its subprocesses') alone
    assert os.environ.get("KERAS_BACKEND") == backend
