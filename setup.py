"""Packaging for tf_mlstm: byte-level multiplicative LSTM language models at scale.

This file is the one home of the package metadata; `pyproject.toml` holds only
the build backend and the tool settings (pytest, ruff, import-linter).

Dependencies are ranges, so tf_mlstm installs beside other packages; the exact
versions the test suite last passed with are in `constraints.txt`
(`pip install -c constraints.txt -e ".[dev,beam]"`).
"""

import pathlib
import re

import setuptools

_HERE = pathlib.Path(__file__).parent


def _version():
    """The version in tf_mlstm/_version.py, read as text (importing the package needs its
    dependencies, which are not installed yet)."""
    text = (_HERE / "tf_mlstm" / "_version.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1)


_BINARIES = {
    # The umbrella: `tf-mlstm train ...` runs `tf-mlstm-train ...`.
    "tf-mlstm": "tf_mlstm.cli.main:run",
    "tf-mlstm-train": "tf_mlstm.cli.train:run",
    "tf-mlstm-eval": "tf_mlstm.cli.eval:run",
    "tf-mlstm-make-tfrecords": "tf_mlstm.cli.make_tfrecords:run",
    "tf-mlstm-transfer": "tf_mlstm.cli.transfer:run",
    "tf-mlstm-classify": "tf_mlstm.cli.classify:run",
    # Needs the beam extra.
    "tf-mlstm-classify-beam": "tf_mlstm.cli.classify_beam:run",
    "tf-mlstm-export": "tf_mlstm.cli.export:run",
    "tf-mlstm-generate": "tf_mlstm.cli.generate:run",
    "tf-mlstm-visualize": "tf_mlstm.cli.visualize:run",
    "tf-mlstm-finetune": "tf_mlstm.cli.finetune:run",
    "tf-mlstm-import-openai": "tf_mlstm.cli.import_openai:run",
    "tf-mlstm-preset": "tf_mlstm.cli.preset:run",
}

_INSTALL_REQUIRES = [
    # TensorFlow and tensorflow-text always from the same minor release: the
    # text ops are compiled against one TensorFlow ABI (tensorflow-text 2.21
    # itself requires tensorflow>=2.21,<2.22). At 2.21 both publish Linux
    # x86_64 wheels for CPython 3.11, 3.12 and 3.13, none for 3.14.
    "tensorflow>=2.21,<2.22",
    "tensorflow-text>=2.21,<2.22",
    # The protos of TensorFlow Serving's warm-up records (PredictionLog), which
    # every export writes; the same minor release as TensorFlow.
    "tensorflow-serving-api>=2.21,<2.22",
    # Keras 3 on the TensorFlow backend: the minor release the test suite
    # passes with; widen the range once it passes with the next one.
    "keras>=3.15,<3.16",
    "numpy>=1.26,<3",
    "absl-py>=2,<3",
    # TensorFlow 2.21 does not depend on TensorBoard; the training summaries
    # are written for it (`tensorboard --logdir=MODEL_DIR`).
    "tensorboard>=2.21,<3",
    # 1.8 is the first release where `LogisticRegression(l1_ratio=1.0)` alone
    # selects the L1 penalty (tf_mlstm/transfer/probe/fit.py); older releases
    # ignore `l1_ratio` unless penalty="elasticnet" and fit L2 with only a warning.
    "scikit-learn>=1.8,<2",
    "matplotlib>=3.9,<4",
]

_EXTRAS_REQUIRE = {
    # Tests, lint and the layering check (what .ci/run runs).
    "dev": [
        "pytest>=8,<10",
        "pytest-timeout>=2.3,<3",
        # The suite runs on every core (`-n auto`): 1.56x faster on 2 cores.
        "pytest-xdist>=3.5,<4",
        # Linters: new releases add rules and change formatting, so the range
        # is the minor release the configuration in pyproject.toml was written for.
        "ruff>=0.17,<0.18",
        "import-linter>=2.17,<3",
    ],
    # NVIDIA GPUs on Linux: TensorFlow with its pip-installed CUDA and cuDNN.
    "gpu": ["tensorflow[and-cuda]>=2.21,<2.22"],
    # TensorBoard's Profile tab, to view what --profile_steps captures. The
    # plugin's releases follow TensorFlow's; from 2.21 on they work with the
    # TensorBoard above.
    "profile": ["tensorboard-plugin-profile>=2.21,<3"],
    # Apache Beam pipelines for the converter and batch classification
    # (`--runner=...`: tf_mlstm/beam/). 2.76 and 2.77 ask protobuf<7 and
    # pillow<13, which TensorFlow 2.21 and matplotlib accept.
    "beam": ["apache-beam>=2.76,<3"],
}

setuptools.setup(
    name="tf_mlstm",
    version=_version(),
    description=(
        "Byte-level multiplicative LSTM language modeling on review text with "
        "TensorFlow 2 / Keras 3: large-batch multi-worker training and "
        "sentiment transfer."
    ),
    long_description=(_HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.14",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    packages=setuptools.find_packages(include=["tf_mlstm", "tf_mlstm.*"]),
    package_data={"tf_mlstm.data": ["demo_corpus.txt"]},
    install_requires=_INSTALL_REQUIRES,
    extras_require=_EXTRAS_REQUIRE,
    entry_points={
        "console_scripts": [f"{name}={target}" for name, target in _BINARIES.items()],
    },
)
