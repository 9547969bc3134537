"""ConvBERT toolkit: pre-train, fine-tune, convert and study ConvBERT (TF2 / Keras 3)."""
from setuptools import find_packages, setup

setup(
    name="convbert-toolkit",
    version="0.1.0",
    description="ConvBERT (span-based dynamic convolution + ELECTRA RTD) in Keras 3",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["model", "model.*", "data", "data.*", "pretrain",
                                    "pretrain.*", "finetune", "finetune.*", "reproduce",
                                    "reproduce.*"]),
    py_modules=["run_pretraining", "run_finetuning", "run_reproduction"],
    package_data={"": ["*.json"]},
    include_package_data=True,
    install_requires=[
        "tensorflow==2.21.*",
        "tensorflow-text==2.21.*",
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
        # the PyTorch ELECTRA reference of benchmarks/rtd_reference.py (run_reproduction --reference).
        "test": ["pytest", "torch==2.13.0", "transformers>=5", "jax[cpu]"],
        "tpu": ["cloud-tpu-client"],
    },
)
