"""Packaging for tf_mlstm: byte-level multiplicative LSTM language models at scale."""

import setuptools

_BINARIES = {
    "tf-mlstm-train": "tf_mlstm.cli.train:run",
    "tf-mlstm-eval": "tf_mlstm.cli.eval:run",
    "tf-mlstm-make-tfrecords": "tf_mlstm.cli.make_tfrecords:run",
    "tf-mlstm-transfer": "tf_mlstm.cli.transfer:run",
    "tf-mlstm-classify": "tf_mlstm.cli.classify:run",
    "tf-mlstm-export": "tf_mlstm.cli.export:run",
    "tf-mlstm-generate": "tf_mlstm.cli.generate:run",
    "tf-mlstm-visualize": "tf_mlstm.cli.visualize:run",
    "tf-mlstm-finetune": "tf_mlstm.cli.finetune:run",
    "tf-mlstm-import-openai": "tf_mlstm.cli.import_openai:run",
}

setuptools.setup(
    name="tf_mlstm",
    version="0.1.0",
    description=(
        "Byte-level multiplicative LSTM language modeling on review text with "
        "TensorFlow 2 / Keras 3: large-batch multi-worker training and "
        "sentiment transfer."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.13",
    packages=setuptools.find_packages(include=["tf_mlstm", "tf_mlstm.*"]),
    package_data={"tf_mlstm.data": ["demo_corpus.txt"]},
    install_requires=[
        "tensorflow==2.21.0",
        "tensorflow-text==2.21.1",
        "keras==3.15.1",
        "numpy>=1.26,<3",
        "absl-py==2.5.1",
        "tensorboard==2.21.0",
        "scikit-learn==1.9.1",
        "matplotlib==3.11.2",
    ],
    extras_require={
        "dev": ["pytest==9.0.3", "pytest-timeout==2.4.0"],
    },
    entry_points={
        "console_scripts": [f"{name}={target}" for name, target in _BINARIES.items()],
    },
)
