"""ConvBERT toolkit: pre-train, fine-tune, convert and study ConvBERT (TF2 / Keras 3)."""
from setuptools import find_packages, setup

setup(
    name="convbert-toolkit",
    version="0.1.0",
    description="ConvBERT (span-based dynamic convolution + ELECTRA RTD) in Keras 3",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["base", "base.*", "model", "model.*", "data", "data.*",
                                    "training", "training.*", "pretrain", "pretrain.*", "finetune",
                                    "finetune.*", "elastic", "elastic.*", "reproduce",
                                    "reproduce.*", "analysis", "analysis.*", "lm", "lm.*",
                                    "keras_hub_convbert", "keras_hub_convbert.*"]),
    py_modules=["run_pretraining", "run_finetuning", "run_reproduction", "run_lm"],
    package_data={"": ["*.json"]},
    include_package_data=True,
    install_requires=[
        # 2.20 is the newest release tensorflow-tpu ships (the `tpu` extra); 2.21 elsewhere.
        "tensorflow>=2.20,<2.22",
        "tensorflow-text>=2.20,<2.22",
        "keras>=3.10",
        "sentencepiece",
        "absl-py",
        "numpy",
        "safetensors",
        "scipy",
        "scikit-learn",
        "matplotlib",
    ],
    extras_require={
        # torch 2.13.0 is the CPU build on our machines; transformers gives the parity oracle and
        # the PyTorch ELECTRA reference of reproduce/rtd_reference.py (run_reproduction --reference).
        # apache-beam: the Beam builder's tests (tests/data/test_beam_builder.py, the `*_beam`
        # cases of tests/test_bad_inputs.py) run on the DirectRunner. pytest-xdist runs the suite
        # on both cores (scripts/test.sh); coverage measures it (scripts/coverage.sh).
        # tensorboard: its own reader (EventAccumulator) reads back the event files that
        # training/summaries.py writes without it (viewing them is all a user needs it for).
        # keras-hub: the KerasHub integration's tests (tests/model/test_keras_hub_backbone.py,
        # tests/keras_hub/), at the version the `keras_hub` extra pins.
        "test": ["pytest", "pytest-xdist>=3.6", "coverage>=7.10", "hypothesis", "torch==2.13.0",
                 "transformers>=5", "jax[cpu]",
                 "apache-beam>=2.77,<3", "tensorboard", "keras-hub==0.32.0"],
        # ConvBERT in KerasHub (keras_hub_convbert/, docs/KERAS_HUB.md): the version its tests
        # run. Nothing in the toolkit's core imports it.
        "keras_hub": ["keras-hub==0.32.0"],
        # The shard builder as an Apache Beam pipeline (build_pretraining_dataset.py --runner=...):
        # the DirectRunner, and Flink/Spark through their job servers. Beam 2.77 holds protobuf
        # below 7 (6.33 installs; TensorFlow 2.21 asks for >=6.31.1,<8).
        "beam": ["apache-beam>=2.77,<3"],
        # ... on Google Cloud Dataflow: Beam's Google Cloud clients (about 80 more packages).
        "dataflow": ["apache-beam[gcp]>=2.77,<3"],
        # A TPU VM, TensorFlow runtime: TensorFlow's TPU build at the version it ships
        # (tensorflow-text 2.20 holds tensorflow at 2.20 too; scripts/setup.sh makes the TPU
        # build's files win), libtpu held at the oldest release tensorflow-tpu accepts (it asks
        # ~=0.0.14; the newest, 0.0.52, aborts TensorFlow 2.20 at import, 0.0.14 loads) and the
        # TPU resolver's client.
        # Keras-on-JAX's runtime (`jax[tpu]`, a newer libtpu) needs a venv of its own: docs/TPU.md §3.
        "tpu": ["tensorflow-tpu==2.20.*", "tensorflow-text==2.20.*", "libtpu==0.0.14",
                "cloud-tpu-client"],
    },
)
